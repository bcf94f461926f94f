"""What one request holds while it is served (its key's tenant, a place for long work), given back
exactly once, when the last of its holders lets go.

The handler that takes a lease holds it (``with Lease() as lease``). Whatever goes on serving the
answer after the handler returns holds a share of its own, taken before the handler lets go: the
thread that runs a streamed request (:meth:`Lease.run_on_thread`), the response that streams it
(:meth:`Lease.share`, let go when the server closes the response). What the lease holds is given back
in the reverse order it was taken, on whichever thread lets go last. Nothing is handed from one
holder to another, so a failure at any point gives everything back and nothing twice.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Lease:
    """The tenant and places one request holds; ended when its handler and every share let go."""

    def __init__(self) -> None:
        self._held = contextlib.ExitStack()
        self._holders = 1  # the handler that took it
        self._lock = threading.Lock()

    def take(self, holding: contextlib.AbstractContextManager[T]) -> T:
        """Hold what ``holding`` gives (a tenant, a place) until the lease ends."""
        return self._held.enter_context(holding)

    def share(self) -> Share:
        """One more holder, that lets go with :meth:`Share.let_go` (or at the end of ``with``)."""
        with self._lock:
            if self._holders == 0:
                raise RuntimeError("this lease has ended")
            self._holders += 1
        return Share(self)

    def run_on_thread(self, target: Callable[[], Any], name: str) -> None:
        """Run ``target`` on a thread of its own that holds the lease until ``target`` returns."""
        share = self.share()

        def run() -> None:
            with share:
                target()

        try:
            threading.Thread(target=run, name=name, daemon=True).start()
        except BaseException:
            share.let_go()
            raise

    def _let_go(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self._held.close()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._let_go()  # the handler's hold


class Share:
    """One holder's part of a :class:`Lease`; letting go twice lets go once."""

    def __init__(self, lease: Lease) -> None:
        self._lease: Lease | None = lease
        self._lock = threading.Lock()

    def let_go(self) -> None:
        with self._lock:
            lease, self._lease = self._lease, None
        if lease is not None:
            lease._let_go()

    def __enter__(self) -> Share:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.let_go()
