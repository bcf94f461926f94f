"""A call made ahead on a thread of its own, whose result (or exception) its caller takes when it
needs it: the next manifest page while the page before is parsed (:mod:`.gateway.client`), or a client's
metadata document, which its request waits for no longer than its limit (:mod:`.oauth.documents`)."""

from __future__ import annotations

import contextvars
import threading
from typing import Any, Callable


class Ahead:
    """A call made on a thread of its own (in the caller's context: its trace, its log fields),
    whose result, or exception, the caller takes when it needs it. ``name`` names the thread."""

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(self._run, call), name=name, daemon=True).start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # handed to the caller, which raises it
            self._error = exc
        finally:
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds`` at most (less when the call ends sooner): whether it has ended."""
        return self._done.wait(seconds)

    def result(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value
