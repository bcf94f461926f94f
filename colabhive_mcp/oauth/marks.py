"""Marks of single use in the instance store, as the OAuth endpoints answer them: a second use is
refused as its caller words it, and a mark that cannot be made refuses the use (503): a use that
cannot be remembered could be repeated."""

from __future__ import annotations

from ..errors import BUSY_RETRY_S
from ..store.interface import InstanceStore, Marked
from .errors import OAuthError

FULL_RETRY_S = 60  # what a refusal for want of room in the store says to wait


def use_once(store: InstanceStore, space: str, name: str, ttl: float, again: OAuthError, generation: int = 0) -> None:
    """Mark ``generation`` of ``name`` used for ``ttl`` seconds; raises ``again`` when it already was,
    and ``temporarily_unavailable`` when the store has no room for the mark or cannot tell (the use
    is refused: a use that cannot be remembered could be repeated)."""
    marked = store.mark(space, name, ttl, generation)
    if marked is Marked.AGAIN:
        raise again
    if marked is Marked.FULL:
        raise OAuthError("temporarily_unavailable", "This server holds as many connections as it can just now; "
                         "try again later.", 503, FULL_RETRY_S)
    if marked is Marked.FAILED:
        raise OAuthError("temporarily_unavailable", "This server cannot record the use just now (its store "
                         "failed); try again shortly.", 503, int(BUSY_RETRY_S))
