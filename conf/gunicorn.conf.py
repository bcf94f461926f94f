# gunicorn -c conf/gunicorn.conf.py 'colabhive_mcp.transports.http:create_app()'
#
# The settings come from colabhive_mcp.transports.http.hosting (the same ones `colabhive-mcp serve`
# uses), which reads the COLABHIVE_* environment (see conf/colabhive-mcp.env.example). This file runs once in
# the gunicorn master, before the workers fork: the session secret made up here (when none is
# configured) is therefore shared by every worker of this instance.
from colabhive_mcp.config import load
from colabhive_mcp.transports.http.hosting import export, gunicorn_settings

globals().update(gunicorn_settings(export(load().config)))
