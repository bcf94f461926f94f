"""The table of methods: every method the server answers is one row, and every row is answered as
it says, in both eras, on both transports' plans."""

import pytest

from colabhive_mcp.protocol import Session, jsonrpc, methods
from colabhive_mcp.protocol.plan import plan
from colabhive_mcp.protocol.server import HANDLERS


def test_every_row_has_a_handler_and_every_handler_a_row():
    answered_before_dispatch = {name for name, row in methods.METHODS.items() if row.opens or row.light}
    assert set(HANDLERS) == set(methods.METHODS) - answered_before_dispatch
    assert all(row.legacy or row.modern for row in methods.METHODS.values())  # (a row no era serves is dead)


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_the_plan_says_of_each_method_what_its_row_says(name):
    row = methods.METHODS[name]
    modern = row.modern and not row.legacy
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"} if modern else {}
    frame = jsonrpc.frame_of({"jsonrpc": "2.0", "id": 1, "method": name, "params": {"_meta": meta, **(
        {row.named: "x"} if row.named else {})}})
    planned = plan(frame)
    assert (planned.long, planned.held, planned.opens) == (row.long, row.held, row.opens)
    assert planned.listens == (name == methods.LISTEN) and planned.calls == (name == methods.CALL)
    assert planned.light == (row.light and not modern)
    assert frame.name == ("x" if row.named else None)  # what its Mcp-Name header must mirror


def test_a_method_the_table_does_not_know_is_not_found_in_either_era(server, tenant):
    session = Session(id="methods")

    def ask(method, params):
        frame = jsonrpc.frame_of({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return server.serve(frame, tenant=tenant, session=session)

    ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    assert ask("resources/list", {})["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
    modern = ask("resources/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                              "io.modelcontextprotocol/clientCapabilities": {}}})
    assert modern["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
    assert ask("server/discover", {})["error"]["code"] == jsonrpc.METHOD_NOT_FOUND  # (a 2026 row, asked legacy)
    assert plan(jsonrpc.frame_of({"jsonrpc": "2.0", "id": 2, "method": "resources/list"})).long is False
