"""The refusals of the OAuth endpoints, as RFC 6749 (and RFC 8707, RFC 7591) name them."""

from __future__ import annotations

from .. import metrics
from ..logs import log


class OAuthError(Exception):
    """A refusal: ``error`` is the RFC's code, ``description`` one sentence for the application's makers,
    ``status`` HTTP's, ``retry_after`` the seconds to wait when trying again later may succeed, and
    ``plain`` what an error page tells a person, when the description is not that already."""

    def __init__(self, error: str, description: str, status: int = 400, retry_after: int | None = None, *,
                 plain: str | None = None) -> None:
        super().__init__(description)
        self.error, self.description, self.status, self.retry_after = error, description, status, retry_after
        self.plain = plain

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


def refused(error: OAuthError) -> None:
    """Count and log a refusal (``oauth.refused``): the RFC's error and the sentence, never a key,
    a code or a token."""
    metrics.OAUTH.labels("refused", error.error).inc()
    log.bind(reason=error.error, detail=error.description).info("oauth.refused")
