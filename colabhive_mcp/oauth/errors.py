"""The refusals of the OAuth endpoints, as RFC 6749 (and RFC 8707, RFC 7591) name them."""

from __future__ import annotations

import re

from .. import metrics
from ..logs import log

# control, format and line-breaking characters: none reaches a page or a log line from a client's text
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def printable(text: str) -> str:
    """``text`` with every control, format or line-breaking character turned into a space."""
    return UNPRINTABLE.sub(" ", text)


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
    log.bind(reason=error.error, detail=printable(error.description)).info("oauth.refused")
