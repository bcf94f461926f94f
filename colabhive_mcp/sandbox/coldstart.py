"""Cold and warm models: the first call per key loads weights; an idle model is unloaded."""

from __future__ import annotations

import math
import threading

from .actions import Timing

LOAD_SHARE = 0.6  # part of a cold start spent queued "loading weights"; the rest runs in steps
COLD_STEPS = 4


class ColdStarts:
    """Per (key, action) model state, for actions marked ``cold_start``."""

    def __init__(self, cold_start_s: float, idle_s: float) -> None:
        self.cold_start_s = cold_start_s
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._models: dict[tuple[str, str], tuple[float, float]] = {}  # -> (ready_at, last_call)

    def timing(self, key: str, slug: str, now: float) -> Timing:
        """The timing of a call made at ``now``; records the call."""
        with self._lock:
            ready_at, last_call = self._models.get((key, slug), (0.0, -math.inf))
            if now - last_call > self.idle_s:
                ready_at = now + self.cold_start_s
                timing = Timing(
                    self.cold_start_s * LOAD_SHARE, self.cold_start_s * (1 - LOAD_SHARE), COLD_STEPS,
                    queued_detail="loading weights", model_state="cold",
                )
            elif now < ready_at:  # another call is loading the model right now
                timing = Timing(ready_at - now, queued_detail="loading weights", model_state="cold")
            else:
                timing = Timing(model_state="warm")
            self._models[(key, slug)] = (ready_at, now)
            return timing

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
