"""Structured logging on stderr, and the redaction every record goes through.

Events are log records whose message is the event name (``manifest.fetched``) and whose fields
are bound extras: ``log.bind(tenant=...).info("manifest.fetched")``. Fields set with
:func:`context` go into every record of the code it wraps (a request's id, the key's hash, the
caller's trace). Every value is redacted before it is written; an exception becomes a redacted
one-line ``exc`` and its frames (file, line, function: never a value).

JSON lines (the default off a terminal) are written here directly: every tool call writes one,
and loguru's record (frame, thread and process look-ups, a patcher, a formatter) cost more than
the line itself. Readable text (on a terminal) is loguru's, loaded with its first record, so
stdio answers ``initialize`` before loguru is imported. Before :func:`configure`, records go to
loguru's default logger.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import os
import re
import sys
import threading
import traceback
from typing import Any, Callable, Iterator, TextIO

# an API key, a bearer token, or a sealed OAuth value (access and refresh token, code, client, form)
_SECRET = re.compile(r"(hive_[A-Za-z0-9_\-]{4,})|((?i:bearer)\s+[A-Za-z0-9._~+/=\-]{4,})"
                     r"|(hmcp_(?:at|rt|code|client|form)_[A-Za-z0-9_\-]{4,})")
_MAYBE_SECRET = re.compile(r"hive_|hmcp_|(?i:bearer)")  # in every secret that _SECRET finds, even JSON-escaped
_REDACTED = ("hive_…redacted", "Bearer …redacted", "hmcp_…redacted")
_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("colabhive_log_context", default={})
ExcInfo = tuple[type[BaseException], BaseException, Any]
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
Writer = Callable[[str, str, dict[str, Any]], None]  # level, event, fields

_threshold = 0  # the least level written (everything, until configured)


class Log:
    """The logger the project writes to: loguru's ``bind`` and level methods."""

    def __init__(self, fields: dict[str, Any] | None = None) -> None:
        self._fields = fields or {}

    def bind(self, **fields: Any) -> Log:
        return Log({**self._fields, **fields})

    def debug(self, event: str) -> None:
        self._emit("DEBUG", event)

    def info(self, event: str) -> None:
        self._emit("INFO", event)

    def warning(self, event: str) -> None:
        self._emit("WARNING", event)

    def error(self, event: str) -> None:
        self._emit("ERROR", event)

    def exception(self, event: str, exc_info: ExcInfo | None = None) -> None:
        """An error with the exception being handled (or ``exc_info``): its redacted one-line
        summary and its frames, never its values."""
        exc_info = exc_info or sys.exc_info()  # type: ignore[assignment]
        self._emit("ERROR", event, exc_info if exc_info[0] is not None else None)  # type: ignore[index]

    def _emit(self, level: str, event: str, exc_info: ExcInfo | None = None) -> None:
        if LEVELS[level] < _threshold:
            return
        fields = {**_context.get(), **self._fields}
        if exc_info is not None:
            fields.update(_described(exc_info))
        _writer(level, event, fields)


log = Log()


@contextlib.contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Every record written inside carries ``fields`` (threads started inside copy them only with
    ``contextvars.copy_context``)."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def redact(text: str) -> str:
    """Replace anything that looks like an API key, a bearer token or a sealed OAuth value."""
    return _SECRET.sub(lambda m: _REDACTED[m.lastindex - 1 if m.lastindex else 0], text)


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None, file: str | None = None) -> None:
    """Send all logs at ``level`` and above to ``stream`` (stderr by default), or appended to
    ``file``, as JSON lines or text; nothing ever goes to stdout. Raises ``OSError`` when ``file``
    cannot be opened."""
    global _threshold, _writer
    stream = open(file, "a", encoding="utf-8", buffering=1) if file else stream or sys.stderr
    threading.excepthook = _thread_failed  # never a raw traceback on stderr, even from a helper thread
    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
    _threshold = LEVELS[level.upper()]
    _writer = _json_writer(stream) if fmt == "json" else _loguru_writer(stream)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_value(v) for v in value]
    return value


def _described(exc_info: ExcInfo) -> dict[str, Any]:
    """An exception as fields: its redacted one-line summary and its last frames, without values."""
    kind, error, frames = exc_info
    return {"exc": redact(f"{kind.__name__}: {error}"),
            "trace": [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in traceback.extract_tb(frames)][-8:]}


def _json_writer(stream: TextIO) -> Writer:
    lock = threading.Lock()  # held across a fork, so that no child starts with it taken (gunicorn forks its workers)
    os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)

    def write(level: str, event: str, fields: dict[str, Any]) -> None:
        line = {"ts": datetime.datetime.now().astimezone().isoformat(timespec="milliseconds"),
                "level": level.lower(), "event": event, "pid": os.getpid()}  # which worker of an instance
        line.update(fields)
        text = json.dumps(line, ensure_ascii=False, default=str)
        if _MAYBE_SECRET.search(text):  # rarely: redact each value (escapes hide some), then what str() made
            text = redact(json.dumps(_redact_value(line), ensure_ascii=False, default=str))
        with lock:
            stream.write(text + "\n")
            stream.flush()

    return write


def _loguru_writer(stream: TextIO | None) -> Writer:
    """Records through loguru, imported with the first: readable lines on ``stream``, or to loguru's
    own default handler (before :func:`configure`)."""
    logger: Any = None

    def write(level: str, event: str, fields: dict[str, Any]) -> None:
        nonlocal logger
        if logger is None:
            from loguru import logger as loaded

            if stream is not None:
                loaded.remove()
                loaded.add(stream, level="DEBUG", format=_text_format, colorize=None, backtrace=False, diagnose=False)
            logger = loaded
        logger.bind(**_redact_value(fields)).log(level, redact(event))

    return write


_writer: Writer = _loguru_writer(None)  # until configured


def _text_format(record: Any) -> str:
    fields = " ".join(f"{k}={{extra[{k}]}}" for k in record["extra"])
    return "<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {message} " + fields + "\n"


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """A thread ended with an exception: one scrubbed record, like every other."""
    if args.exc_type is SystemExit:
        return
    error = args.exc_value if args.exc_value is not None else args.exc_type()
    log.bind(thread=args.thread.name if args.thread else None).exception(
        "thread.failed", (args.exc_type, error, args.exc_traceback))
