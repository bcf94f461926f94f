"""Fixtures: one sandbox gateway on loopback for the whole run, reset before every test."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import requests

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B, Sandbox

COLD_START_S = 1.0


class GatewayClient(requests.Session):
    """A requests session for one demo key; relative paths go to the sandbox's gateway URL."""

    def __init__(self, base_url: str, key: str) -> None:
        super().__init__()
        self.base_url = base_url
        self.headers["X-API-Key"] = key

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        kwargs.setdefault("timeout", 10)
        return super().request(method, url if url.startswith("http") else self.base_url + url, *args, **kwargs)

    def invoke(self, slug: str, args: dict[str, Any] | None = None, **body: Any) -> requests.Response:
        """POST ``:invoke`` with ``{"input": args, **body}``."""
        return self.post(f"/actions/{slug}:invoke", json={"input": args or {}, **body})

    def poll(self, invocation_id: str) -> requests.Response:
        return self.get(f"/invocations/{invocation_id}")


@pytest.fixture(scope="session")
def running_sandbox() -> Iterator[Sandbox]:
    with Sandbox(cold_start_s=COLD_START_S, page_size=8, poll_after_s=0.2, conformance_tools=True) as sandbox:
        yield sandbox


@pytest.fixture
def sb(running_sandbox: Sandbox) -> Sandbox:
    """The shared sandbox, freshly reset."""
    running_sandbox.reset()
    return running_sandbox


@pytest.fixture
def alpha(sb: Sandbox) -> Iterator[GatewayClient]:
    with GatewayClient(sb.url, DEMO_KEY) as client:
        yield client


@pytest.fixture
def beta(sb: Sandbox) -> Iterator[GatewayClient]:
    with GatewayClient(sb.url, DEMO_KEY_B) as client:
        yield client
