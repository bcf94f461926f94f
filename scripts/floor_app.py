"""The stack's floor, which ``bench.py`` measures beside the server (``baseline.FloorServer``): the
least a server on this project's stack can do per warm ``tools/call``.

A WSGI app of a dozen lines on gunicorn (gthread, the project's default workers and threads) that
reads the JSON-RPC request from the raw ``environ``, forwards the call to the gateway's ``:invoke``
with a ``requests`` session (``trust_env`` off) and answers. No checks, no limits, no logs, no
metrics: the server's CPU per call over this one's is what the project's own work costs::

    FLOOR_GATEWAY=http://127.0.0.1:8766/api/builder/v1 gunicorn -k gthread --chdir scripts floor_app:app
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable

import requests

_session = requests.Session()
_session.trust_env = False


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    request = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
    params = request["params"]
    upstream = _session.post(f"{os.environ['FLOOR_GATEWAY']}/actions/{params['name']}:invoke",
                             json={"input": params.get("arguments", {}), "sync": True}, timeout=30,
                             headers={"X-API-Key": environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ")})
    text = json.dumps(upstream.json().get("result"))
    answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
        "content": [{"type": "text", "text": text}], "resultType": "complete"}}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
    return [answer]


if __name__ == "__main__":  # an app for gunicorn, not a command: running it says what it is
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).print_help()
