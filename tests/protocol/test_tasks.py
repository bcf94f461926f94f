"""Tasks in both designs: 2025-11-25 core tasks and the 2026-07-28 extension, bound to the key."""

import threading
import time

import pytest

from colabhive_mcp.calls.cancellation import Cancellation
from colabhive_mcp.invocation import Invocation
from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY_B
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client

EXTENSION = "io.modelcontextprotocol/tasks"


@pytest.fixture
def legacy(server, tenant):
    client = Client(server, tenant)
    assert client.initialize("2025-11-25")["result"]["capabilities"]["tasks"] == {
        "cancel": {}, "requests": {"tools": {"call": {}}}}
    return client


def modern_caps(**extra):
    return {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}, **extra}


def modern_task_call(client, name, arguments):
    params = {"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", **modern_caps()}}
    return client.request("tools/call", params)


def modern_task_request(client, method, task_id, with_extension=True):
    caps = {"extensions": {EXTENSION: {}}} if with_extension else {}
    return client.request(method, {"taskId": task_id, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}})


def test_only_long_running_tools_offer_tasks(legacy):
    tools = {t["name"]: t for t in legacy.request("tools/list")["result"]["tools"]}
    assert tools["batch-report"]["execution"] == {"taskSupport": "optional"}
    assert tools["cold-summarizer"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["echo"]
    refused = legacy.request("tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}})
    assert refused["error"]["code"] == -32601


@pytest.mark.slow
def test_core_tasks_create_get_result_and_bind_to_the_key(legacy, server, config):
    created = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 2}, "task": {"ttl": 60000}})
    task = created["result"]["task"]
    assert task["status"] == "working" and task["taskId"].startswith("t1.")
    assert task["createdAt"] and task["lastUpdatedAt"] and task["ttl"] > 0 and task["pollInterval"] > 0
    assert legacy.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "working"
    result = legacy.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert "report ready" in result["content"][0]["text"]
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    assert legacy.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "completed"
    assert legacy.request("tasks/cancel", {"taskId": task["taskId"]})["error"]["code"] == -32602  # finished
    stranger = Client(Server(config), Tenant(config, DEMO_KEY_B))
    stranger.initialize("2025-11-25")
    assert stranger.request("tasks/get", {"taskId": task["taskId"]})["error"]["code"] == -32602
    assert legacy.request("tasks/get", {"taskId": task["taskId"] + "x"})["error"]["code"] == -32602
    assert legacy.request("tasks/list")["error"]["code"] == -32601


def test_core_task_cancel_stops_the_upstream_work(legacy, journal):
    task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 60}, "task": {}})["result"]["task"]
    cancelled = legacy.request("tasks/cancel", {"taskId": task["taskId"]})["result"]
    assert cancelled["status"] == "cancelled" and len(journal("cancel")) == 1
    assert legacy.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "cancelled"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_task_the_gateway_cannot_stop_is_never_said_to_be_cancelled(era, legacy, server, tenant, sandbox, journal):
    """The contract: a gateway without the cancel route answers 404 or 405, and its work goes on: a
    2025-11-25 tasks/cancel says so; the 2026 extension's is an acknowledgment whatever happens, and
    tasks/get goes on saying working."""
    sandbox.faults.add(route="cancel", kind="status", status=405, body={"detail": "no cancel route"}, count=None)
    if era == "legacy":
        task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 60}, "task": {}})["result"]["task"]
        task_id, client = task["taskId"], legacy
        refused = legacy.request("tasks/cancel", {"taskId": task_id})
        assert legacy.request("tasks/get", {"taskId": task_id})["result"]["status"] == "working"
    else:
        client = Client(server, tenant)
        task_id = modern_task_call(client, "batch-report", {"seconds": 60})["result"]["taskId"]
        acknowledged = modern_task_request(client, "tasks/cancel", task_id)
        assert "error" not in acknowledged and acknowledged["result"]["resultType"] == "complete", acknowledged
        assert modern_task_request(client, "tasks/get", task_id)["result"]["status"] == "working"
        assert len(journal("cancel")) == 1
        return
    assert refused["error"]["code"] == -32603 and "goes on" in refused["error"]["message"]
    assert len(journal("cancel")) == 1


def test_a_task_that_ends_before_its_cancel_reaches_the_gateway_cannot_be_cancelled(legacy, tenant, monkeypatch):
    """The gateway's answer to the cancel is a finished invocation: the task is not said to be cancelled."""
    task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 60}, "task": {}})["result"]["task"]
    monkeypatch.setattr(tenant, "stop", lambda invocation_id: Invocation(invocation_id, "succeeded"))
    assert legacy.request("tasks/cancel", {"taskId": task["taskId"]})["error"]["code"] == -32602


def test_a_cancel_the_gateway_is_still_carrying_out_is_a_cancelled_task(legacy, tenant, monkeypatch):
    """2025-11-25: the receiver moves the task to cancelled before it answers (the gateway may take a
    moment to stop the work: its answer says running)."""
    task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 60}, "task": {}})["result"]["task"]
    monkeypatch.setattr(tenant, "stop", lambda invocation_id: Invocation(invocation_id, "running"))
    assert legacy.request("tasks/cancel", {"taskId": task["taskId"]})["result"]["status"] == "cancelled"


def test_a_cancel_of_work_the_gateway_no_longer_has_is_task_not_found(server, tenant, monkeypatch):
    client = Client(server, tenant)
    task_id = modern_task_call(client, "batch-report", {"seconds": 60})["result"]["taskId"]
    monkeypatch.setattr(tenant, "stop", lambda invocation_id: None)  # :cancel answered 404
    monkeypatch.setattr(tenant, "invocation", lambda invocation_id: None)  # and so does the invocation
    refused = modern_task_request(client, "tasks/cancel", task_id)["error"]
    assert refused["code"] == -32602 and "not found" in refused["message"]


def test_giving_up_on_tasks_result_leaves_the_task_running(legacy, journal):
    """Only tasks/cancel stops a task: a tasks/result that is cancelled (or cut by a shutdown) just
    stops waiting, with an error rather than an invented result."""
    task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 60}, "task": {}})["result"]["task"]
    stop = Cancellation()  # a client's cancel (no reason), 0.3 s in
    threading.Timer(0.3, stop.set).start()
    answer = legacy.request("tasks/result", {"taskId": task["taskId"]}, cancelled=stop)
    assert answer is None or ("error" in answer and "still running" in answer["error"]["message"])
    assert not journal("cancel")
    assert legacy.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "working"


def test_a_failing_task_is_failed_in_2025_11_25(legacy):
    task = legacy.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 1, "fail": True},
                                         "task": {}})["result"]["task"]
    result = legacy.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["isError"] is True
    assert legacy.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "failed"


def test_older_sessions_have_no_tasks(server, tenant):
    client = Client(server, tenant)
    assert "tasks" not in client.initialize("2025-06-18")["result"]["capabilities"]
    assert client.request("tasks/get", {"taskId": "t1.x.y"})["error"]["code"] == -32601
    plain = client.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 0}, "task": {}})
    assert "report ready" in plain["result"]["content"][0]["text"]  # the task field is ignored


@pytest.mark.slow
def test_extension_tasks_for_a_declaring_client(server, tenant):
    client = Client(server, tenant)
    discovered = client.modern("server/discover")["result"]
    assert discovered["capabilities"]["extensions"] == {EXTENSION: {}}
    created = modern_task_call(client, "batch-report", {"seconds": 2})["result"]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["ttlMs"] > 0 and created["pollIntervalMs"] > 0 and "ttl" not in created
    fast = modern_task_call(client, "echo", {"text": "no task for this"})["result"]
    assert fast["resultType"] == "complete" and fast["content"][0]["text"] == "no task for this"
    first = modern_task_request(client, "tasks/get", created["taskId"])["result"]
    assert first["resultType"] == "complete" and first["status"] == "working" and "result" not in first
    deadline = time.monotonic() + 20
    while first["status"] == "working" and time.monotonic() < deadline:
        time.sleep(0.3)
        first = modern_task_request(client, "tasks/get", created["taskId"])["result"]
    assert first["status"] == "completed" and "report ready" in first["result"]["content"][0]["text"]
    assert modern_task_request(client, "tasks/update", created["taskId"])["result"] == {"resultType": "complete",
        "_meta": first["_meta"]}
    refused = modern_task_request(client, "tasks/get", created["taskId"], with_extension=False)
    assert refused["error"]["code"] == -32021
    assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


@pytest.mark.slow
def test_extension_failures_are_completed_error_results_and_cancel_acknowledges(server, tenant, journal):
    client = Client(server, tenant)
    failing = modern_task_call(client, "batch-report", {"seconds": 0.5, "fail": True})["result"]
    time.sleep(1.5)
    done = modern_task_request(client, "tasks/get", failing["taskId"])["result"]
    assert done["status"] == "completed" and done["result"]["isError"] is True
    long = modern_task_call(client, "batch-report", {"seconds": 60})["result"]
    assert modern_task_request(client, "tasks/cancel", long["taskId"])["result"]["resultType"] == "complete"
    assert len(journal("cancel")) == 1
    assert modern_task_request(client, "tasks/get", long["taskId"])["result"]["status"] == "cancelled"


def test_a_client_without_the_extension_gets_a_plain_result(server, tenant):
    client = Client(server, tenant)
    answer = client.call("batch-report", {"seconds": 0}, modern=True)
    assert answer["result"]["resultType"] == "complete"
