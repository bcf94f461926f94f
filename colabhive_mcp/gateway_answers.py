"""What the Builder Gateway's answers say: a body read within its cap, JSON read once (its depth
checked first), an :class:`Invocation`, a manifest page's valid entries, and any failure as one
:class:`GatewayError`, which keeps the HTTP status, a readable message and the ``Retry-After`` hint."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .encoding import too_deep
from .errors import ColabHiveError
from .logs import log, redact

if TYPE_CHECKING:
    import requests

READ_CHUNK = 256 * 1024

# The contract's states: queued, running, succeeded (= completed), failed, cancelled. A state it
# does not name (a gateway newer than it) is kept as sent, and read as still working.
TERMINAL = frozenset({"succeeded", "completed", "failed", "cancelled"})


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


@dataclass(frozen=True, slots=True)
class Invocation:
    """An invocation as the gateway last described it: the fields of the contract its consumers
    read, each checked as it is read (:meth:`of`); the gateway's other fields are not kept."""

    id: str  # the gateway's name for the work ("invocation_id"): the contract gives every invocation one
    status: str  # "queued", "running", "succeeded", "completed", "failed", "cancelled", or a newer state
    slug: str | None = None  # the action's ("action_slug")
    detail: str | None = None  # "status_detail": "loading weights"
    model_state: str | None = None  # "cold" or "warm"
    fraction: float | None = None  # how far the work says it is, 0 to 1 ("progress" / "total")
    step: str | None = None  # the work's own word on where it is ("progress"."message": "step 2 of 5")
    result: Any = None  # the action's answer: any JSON (the contract names the shapes seen)
    error: str | dict[str, Any] | None = None  # why it failed: text, or {"code", "message"}
    updated_at: str | None = None  # when it last changed, by the gateway's clock (ISO 8601)

    @classmethod
    def of(cls, body: Any) -> Invocation:
        """The invocation a JSON body describes. Raises :class:`ValueError` saying what is missing
        (a status, the id); a field of the wrong type is as good as absent. A status the contract does
        not name (a gateway newer than it) is kept, and is not terminal: the work is followed on."""
        if not isinstance(body, dict) or not isinstance(body.get("status"), str):
            raise ValueError("no 'status'")
        status, name, progress = body["status"], body.get("invocation_id"), body.get("progress")
        if not isinstance(name, str) or not name:
            raise ValueError("no 'invocation_id'")
        if not isinstance(progress, dict):
            progress = {}
        error = body.get("error")
        return cls(name, status, slug=_text(body.get("action_slug")),
                   detail=_text(body.get("status_detail")), model_state=_text(body.get("model_state")),
                   fraction=_fraction(progress.get("progress"), progress.get("total")),
                   step=_text(progress.get("message")), result=body.get("result"),
                   error=error if isinstance(error, (str, dict)) else None, updated_at=_text(body.get("updated_at")))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status in ("succeeded", "completed")  # the same, by the contract


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _fraction(done: Any, total: Any) -> float | None:
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return max(0.0, min(1.0, done / total))
    return None


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
