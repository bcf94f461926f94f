"""The official MCP Python SDK as the client of `colabhive-mcp stdio --sandbox`, in both eras."""

import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters

from ..support.environ import server_env

pytestmark = pytest.mark.real_clients

SERVER = StdioServerParameters(command=sys.executable, args=["-m", "colabhive_mcp", "stdio", "--sandbox",
                                                             "--poll-initial", "0.1", "--poll-max-interval", "0.5"],
                               env=server_env())


async def session_walkthrough(mode):
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async with Client(SERVER, mode=mode, read_timeout_seconds=60) as client:
        version = client.protocol_version
        assert client.server_info.name == "colabhive-mcp"
        tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        assert {"hive-chat", "cold-summarizer", "flaky-translate", "alpha-classifier"} <= names
        assert all(t.description for t in tools)
        fast = await client.call_tool("hive-chat", {"prompt": "hello from the SDK"})
        assert not fast.is_error and "hello from the SDK" in fast.content[0].text
        slow = await client.call_tool("batch-report", {"seconds": 5}, progress_callback=on_progress)
        assert not slow.is_error and "report ready" in slow.content[0].text
        failing = await client.call_tool("flaky-translate", {"text": "bonjour"})
        assert failing.is_error and "upstream model crashed" in failing.content[0].text
        image = await client.call_tool("image-gen-tiny", {"prompt": "bees", "size": 16})
        assert image.content[0].type == "image" and image.content[0].mime_type == "image/png"
    values = [p[0] for p in progress]
    assert len(progress) >= 3 and values == sorted(values) and all(p[2] for p in progress)
    return version


@pytest.mark.parametrize("mode,expected", [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_official_sdk_client(mode, expected):
    assert anyio.run(session_walkthrough, mode) == expected
