"""The protocol core driven in process, as a transport drives it: frames in, answers and
notifications out, in either era."""

from colabhive_mcp.protocol import Session, jsonrpc

MODERN = "2026-07-28"


class Client:
    """Calls Server.handle the way a transport does, collecting notifications."""

    def __init__(self, server, tenant, session=None):
        self.server, self.tenant = server, tenant
        self.session = session or Session(id="test")
        self.notifications = []
        self.ids = iter(range(1, 10_000))

    def send(self, message, cancelled=None):
        return self.server.serve(jsonrpc.frame_of(message), tenant=self.tenant, session=self.session,
                                  notify=self.notifications.append, cancelled=cancelled)

    def request(self, method, params=None, **kwargs):
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            message["params"] = params
        return self.send(message, **kwargs)

    def initialize(self, version="2025-11-25"):
        answer = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                             "clientInfo": {"name": "pytest", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def modern(self, method, params=None, **meta):
        params = dict(params or {})
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN,
                           "io.modelcontextprotocol/clientCapabilities": {}, **meta}
        return self.request(method, params)

    def call(self, name, arguments=None, modern=False, **meta):
        params = {"name": name, "arguments": arguments or {}}
        if modern:
            return self.modern("tools/call", params, **meta)
        if meta:
            params["_meta"] = meta
        return self.request("tools/call", params)


def text_of(answer):
    return answer["result"]["content"][0]["text"]
