"""What the Builder Gateway's answers say: a body read within its cap, JSON read once (its depth
checked first), an :class:`~colabhive_mcp.invocation.Invocation`, a manifest page's valid entries, and any failure as one
:class:`GatewayError`, which keeps the HTTP status, a readable message and the ``Retry-After`` hint."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ..encoding import too_deep
from ..errors import ColabHiveError
from ..invocation import Invocation
from ..logs import log, redact

if TYPE_CHECKING:
    import requests

READ_CHUNK = 256 * 1024


class GatewayError(ColabHiveError):
    """A gateway request failed: ``status`` is ``None`` when no HTTP answer arrived."""

    http_status = 502

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 gateway_code: str | None = None, garbled: bool = False, invocation_id: str | None = None) -> None:
        super().__init__(message, retry_after)
        self.status = status  # the gateway's
        self.gateway_code = gateway_code  # the gateway's own name for the error, when it gave one
        self.garbled = garbled  # an answer we could not read (e.g. a proxy's HTML page)
        self.invocation_id = invocation_id  # the work it is about, when that exists upstream

    def about(self, invocation_id: str | None) -> GatewayError:
        """The same failure, naming the invocation whose work exists upstream (the error caught
        stays as it was: it is this one's cause)."""
        return GatewayError(self.message, self.status, self.retry_after, self.gateway_code, self.garbled, invocation_id)

    @property
    def transient(self) -> bool:
        """Worth trying again later: no answer, an unreadable one, 429, or a 5xx."""
        return self.status is None or self.garbled or self.status == 429 or self.status >= 500

    @property
    def throttled(self) -> bool:
        """The gateway asked to be asked again later, and said when (a 429 or 503 with ``Retry-After``):
        not a failure of the gateway."""
        return self.status in (429, 503) and self.retry_after is not None


def read_body(response: requests.Response, cap: int) -> None:
    """Read the body, decoded, into ``response.content``; more than ``cap`` bytes is a GatewayError
    (measured as it is decoded: a small gzip body that would inflate to gigabytes stops at ``cap``)."""
    chunks, size = [], 0
    for chunk in response.iter_content(READ_CHUNK):
        size += len(chunk)
        if size > cap:
            response.close()
            raise GatewayError(f"the gateway's answer is larger than {cap} bytes once decoded (the limit)",
                               status=response.status_code)
        chunks.append(chunk)
    response._content = b"".join(chunks)


def json_body(response: requests.Response) -> Any:
    try:
        text = response.content.decode("utf-8")  # decoded once: judged for depth, then parsed
        if too_deep(text):
            raise ValueError("nested too deep")
        return json.loads(text)
    except ValueError:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise GatewayError(f"the gateway answered {response.status_code} with a body that is not JSON",
                           status=response.status_code, garbled=True) from None


def invocation_of(response: requests.Response) -> Invocation:
    """The invocation the answer describes; an answer that is not one is a garbled GatewayError (it
    names the work when the answer did, so that the work is not lost)."""
    body = json_body(response)
    try:
        return Invocation.of(body)
    except ValueError as exc:
        named = body.get("invocation_id") if isinstance(body, dict) else None
        raise GatewayError(f"the gateway's answer is not an invocation ({exc})", status=response.status_code,
                           garbled=True, invocation_id=named if isinstance(named, str) and named else None) from None


def valid_entries(tools: list[Any]) -> list[dict[str, Any]]:
    valid = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"]]
    if len(valid) != len(tools):
        log.bind(skipped=len(tools) - len(valid)).warning("manifest.invalid_entries")
    return valid


def error_of(response: requests.Response) -> GatewayError:
    """Map an HTTP error answer to one GatewayError, whatever shape its body has."""
    message, code = None, None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = body.get("detail", body.get("error"))
        if isinstance(detail, str):
            message = detail
        elif isinstance(detail, dict):
            message = detail.get("message") if isinstance(detail.get("message"), str) else None
            code = detail.get("code") if isinstance(detail.get("code"), str) else None
        elif isinstance(detail, list):  # e.g. a validation error list
            message = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    if not message:
        message = response.reason or "error"
    message = redact(message)  # an upstream error may quote a key: it goes no further
    return GatewayError(f"{response.status_code} {message}", status=response.status_code,
                        retry_after=retry_after_of(response), gateway_code=code)


def retry_after_of(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # an HTTP date: rare, and slow to import

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def reason_of(exc: Exception) -> str:
    """The root cause in a few words ("[Errno 111] Connection refused"), not urllib3's wrappers."""
    cause: Any = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else exc
    while isinstance(getattr(cause, "reason", None), BaseException):
        cause = cause.reason
    text = str(cause).rsplit("): ", 1)[-1]  # drop "HTTPConnection(host=..., port=...)" prefixes
    return text if len(text) < 200 else text[:200] + "…"
