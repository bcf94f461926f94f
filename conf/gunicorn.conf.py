# gunicorn -c conf/gunicorn.conf.py 'colabhive_mcp.transports.http:create_app()'
#
# The settings come from colabhive_mcp.transports.http.hosting (the same ones `colabhive-mcp serve`
# uses), which reads the COLABHIVE_* environment (see conf/colabhive-mcp.env.example). This file runs once in
# the gunicorn master, before the workers fork: the runtime directory prepared here (the instance
# store, the cancel relay) is therefore shared by every worker of this instance. Hosted mode needs
# COLABHIVE_SESSION_SECRET; a worker refuses to start without it.
from colabhive_mcp.config import load
from colabhive_mcp.transports.http.hosting import export, gunicorn_settings

globals().update(gunicorn_settings(export(load().config)))
