"""The stdio server's request threads: at most ``size`` at once, the rest wait their turn.

Unlike :class:`concurrent.futures.ThreadPoolExecutor`, whose threads the interpreter joins at exit,
these are daemon threads: a request still stuck on a gateway that does not answer never keeps the
process alive once its host has gone.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable


class Workers:
    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = max(1, size), name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self._threads = 0
        self._busy = 0  # jobs queued or running
        self._closed = False
        self._settled = threading.Condition()

    def submit(self, job: Callable[..., None], *args: Any) -> None:
        """Run ``job(*args)`` on a worker thread, once one is free (never after :meth:`close`)."""
        with self._settled:
            if self._closed:
                return
            self._busy += 1
            start = self._busy > self._threads and self._threads < self._size
            if start:
                self._threads += 1
        if start:
            threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
        self._jobs.put((job, args))

    def close(self) -> None:
        """Take no more jobs (those already taken still run)."""
        with self._settled:
            self._closed = True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the jobs taken to end; whether they all did."""
        with self._settled:
            return self._settled.wait_for(lambda: self._busy == 0, timeout)

    def _work(self) -> None:
        while True:
            job, args = self._jobs.get()
            try:
                job(*args)
            finally:
                with self._settled:
                    self._busy -= 1
                    self._settled.notify_all()
