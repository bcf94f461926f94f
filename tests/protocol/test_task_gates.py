"""A tool call that becomes a task passes the same gates as a call (real gunicorn, real sandbox):
the user's confirmation before the task exists, and the key's limits for as long as it runs."""

import time

import pytest


from ..support.catalogue import WRITER
from ..support.http_server import hosted_server
from ..support.http_client import initialize, modern, rpc

pytestmark = pytest.mark.slow

EXTENSION = "io.modelcontextprotocol/tasks"


def capabilities(*names):
    caps = {"extensions": {EXTENSION: {}}}
    if "elicitation" in names:
        caps["elicitation"] = {}
    return {"io.modelcontextprotocol/clientCapabilities": caps}


def task_call(url, name, arguments, *names, **params):
    answer = modern(url, "tools/call", {"name": name, "arguments": arguments, "_meta": capabilities(*names),
                                         **params})
    return answer.json()


@pytest.fixture
def writer(sandbox):
    sandbox.add_action(WRITER, seconds=1.0)


@pytest.fixture(scope="module")
def confirming(gateway_sandbox):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", confirm_side_effects="require") as two:
        yield two


def test_a_2026_task_is_created_only_once_the_user_confirms(confirming, writer, journal):
    asked = task_call(confirming.url, "slow-writer", {"text": "hi"}, "elicitation")["result"]
    assert asked["resultType"] == "input_required" and journal("invoke") == []
    answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    created = task_call(confirming.url, "slow-writer", {"text": "hi"}, "elicitation",
                        inputResponses=answer, requestState=asked["requestState"])["result"]
    assert created["resultType"] == "task" and len(journal("invoke")) == 1
    declined = task_call(confirming.url, "slow-writer", {"text": "hi"}, "elicitation")["result"]
    refused = task_call(confirming.url, "slow-writer", {"text": "hi"}, "elicitation", requestState=declined["requestState"],
                        inputResponses={"confirm": {"action": "decline"}})["result"]
    assert refused["isError"] is True and len(journal("invoke")) == 1


def test_a_2026_task_is_refused_to_a_client_that_cannot_confirm(confirming, writer, journal):
    refused = task_call(confirming.url, "slow-writer", {"text": "hi"})
    assert refused["error"]["code"] == -32021 and journal("invoke") == []


def test_a_2025_task_is_refused_to_a_client_that_cannot_confirm(confirming, writer, journal):
    session = initialize(confirming.url)
    answer = rpc(confirming.url, "tools/call", {"name": "slow-writer", "arguments": {"text": "hi"},
                                                 "task": {"ttl": 60000}}, session=session).json()["result"]
    assert answer["isError"] is True and "confirmation" in answer["content"][0]["text"]
    assert journal("invoke") == []


def test_tasks_hold_the_keys_call_places_while_they_run(gateway_sandbox, sandbox, journal):
    """With one call at a time per key, one of six task calls starts, and neither another task nor a
    call starts until its work has ended upstream, even past the longest a call would wait; then both
    do. 2025-11-25 tasks count too."""
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", tenant_max_concurrent=1, poll_max_wait=1) as two:
        answers = [task_call(two.url, "batch-report", {"seconds": 8})["result"] for _ in range(6)]
        created = [a for a in answers if a.get("resultType") == "task"]
        refused = [a for a in answers if a.get("isError")]
        assert len(created) == 1 and len(refused) == 5 and len(journal("invoke")) == 1
        assert "already has 1 ColabHive calls running" in refused[0]["content"][0]["text"]
        call = modern(two.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}}).json()["result"]
        assert call["isError"] is True  # a plain call waits for the task's place too
        session = initialize(two.url)
        legacy = rpc(two.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1},
                                              "task": {"ttl": 60000}}, session=session).json()["result"]
        assert legacy["isError"] is True and len(journal("invoke")) == 1
        time.sleep(1.5)  # past poll_max_wait: the task's work (8 s) still runs, and still holds its place
        assert task_call(two.url, "batch-report", {"seconds": 1})["result"].get("isError") is True
        deadline = time.monotonic() + 30
        while modern(two.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}}).json()["result"].get("isError"):
            assert time.monotonic() < deadline, "the task's place never came back"
            time.sleep(0.2)
        assert task_call(two.url, "batch-report", {"seconds": 1})["result"]["resultType"] == "task"


def test_a_task_past_the_calls_per_minute_is_refused(gateway_sandbox, sandbox, journal):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", tenant_calls_per_minute=2) as two:
        answers = [task_call(two.url, "batch-report", {"seconds": 1})["result"] for _ in range(4)]
    assert [a.get("resultType") for a in answers[:2]] == ["task", "task"]
    assert all(a.get("isError") and "in the last minute" in a["content"][0]["text"] for a in answers[2:])
    assert len(journal("invoke")) == 2
