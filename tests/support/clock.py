"""A clock for components that take one: time passes when the test says so, not while it sleeps."""


class FakeClock:
    """``clock()`` answers :attr:`now`; ``clock.advance(seconds)`` moves it on."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
