"""Waiting in tests for something another thread or process does: one helper, used everywhere."""

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, every: float = 0.02) -> T:
    """Ask ``condition`` every ``every`` seconds until it answers something true or ``timeout``
    seconds pass; its last answer (so ``assert wait_until(...)`` fails when time ran out)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer or time.monotonic() >= deadline:
            return answer
        time.sleep(every)
