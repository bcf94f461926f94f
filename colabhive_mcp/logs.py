"""Structured logging on stderr with loguru, and the redaction every record goes through.

Events are log records whose message is the event name (``manifest.fetched``) and whose fields
are bound extras: ``log.bind(tenant=...).info("manifest.fetched")``. Fields set with
:func:`context` go into every record of the code it wraps (a request's id, the key's hash, the
caller's trace). JSON lines by default; readable text when stderr is a terminal.

loguru takes longer to import than everything else stdio needs to answer ``initialize``, so
stdio configures logging *deferred*: its records wait in memory, with their time, until
:func:`load` (stdio calls it half a second after it starts, when the handshake is answered), a
warning or an error, or the normal exit of the process.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import datetime
import json
import re
import sys
import threading
import traceback
from typing import Any, Iterator, TextIO

_SECRET = re.compile(r"(hive_[A-Za-z0-9_\-]{4,})|((?i:bearer)\s+[A-Za-z0-9._~+/=\-]{4,})")
_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("colabhive_log_context", default={})
ExcInfo = tuple[type[BaseException], BaseException, Any]

_logger: Any = None  # loguru's logger, once logging is loaded
_deferred: dict[str, Any] | None = None  # the settings of a deferred configure, until it is loaded
_pending: list[tuple[datetime.datetime, str, str, dict[str, Any], ExcInfo | None]] = []
_load_lock = threading.Lock()
MAX_PENDING = 1000  # records kept while loading is deferred (the oldest are kept)


class Log:
    """The logger the project writes to: loguru's ``bind`` and level methods, plus deferral."""

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
        fields = {**_context.get(), **self._fields}
        logger = _logger or _loaded_unless_waiting(level, event, fields, exc_info)
        if logger is not None:
            _write(logger, level, event, fields, exc_info)


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
    """Replace anything that looks like an API key or bearer token."""
    return _SECRET.sub(lambda m: "hive_…redacted" if m.group(1) else "Bearer …redacted", text)


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None, file: str | None = None,
              *, defer: bool = False) -> None:
    """Send all logs to ``stream`` (stderr by default), or appended to ``file``, as JSON lines or
    text; nothing ever goes to stdout. ``defer``: keep records in memory until :func:`load`.
    Raises ``OSError`` when ``file`` cannot be opened."""
    global _deferred
    stream = open(file, "a", encoding="utf-8", buffering=1) if file else stream or sys.stderr
    threading.excepthook = _thread_failed  # never a raw traceback on stderr, even from a helper thread
    with _load_lock:
        _deferred = {"level": level, "fmt": fmt, "stream": stream}
    if defer:
        atexit.register(load)  # what is still waiting is written before the process ends
    else:
        load()


def load() -> None:
    """Import loguru, apply the deferred settings, and write the records that waited."""
    global _deferred, _logger
    with _load_lock:
        if _deferred is not None:
            _logger = _apply(**_deferred)
            _deferred = None
        elif _logger is None:
            from loguru import logger
            _logger = logger
        waiting = _pending[:]
        _pending.clear()
    for when, level, event, fields, exc_info in waiting:
        _write(_logger.patch(lambda record, when=when: record.update(time=when)), level, event, fields, exc_info)


def _write(logger: Any, level: str, event: str, fields: dict[str, Any], exc_info: ExcInfo | None) -> None:
    if exc_info is not None:
        logger = logger.opt(exception=exc_info)
    logger.bind(**fields).log(level, event)


def _loaded_unless_waiting(level: str, event: str, fields: dict[str, Any], exc_info: ExcInfo | None) -> Any:
    """loguru's logger, loaded now; ``None`` when loading is deferred and the record (not a
    warning or an error) waits for it instead."""
    with _load_lock:
        if _deferred is not None and level in ("DEBUG", "INFO"):
            if len(_pending) < MAX_PENDING:
                _pending.append((datetime.datetime.now().astimezone(), level, event, fields, exc_info))
            return None
    load()
    return _logger


def _apply(level: str, fmt: str, stream: TextIO) -> Any:
    from loguru import logger

    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
    logger.remove()
    logger.configure(patcher=_scrub)
    if fmt == "json":
        logger.add(_json_sink(stream), level=level.upper(), format="{message}", backtrace=False, diagnose=False)
    else:
        logger.add(stream, level=level.upper(), format=_text_format, colorize=None, backtrace=False, diagnose=False)
    return logger


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_value(v) for v in value]
    return value


def _scrub(record: dict[str, Any]) -> None:
    """Every record passes here first: secrets are redacted from the message and the fields, and
    an exception becomes a redacted one-line ``exc`` plus its frames (file, line, function: no values)."""
    record["message"] = redact(record["message"])
    record["extra"] = _redact_value(record["extra"])
    exception = record["exception"]
    if exception is not None and exception.type is not None:
        record["extra"]["exc"] = redact(f"{exception.type.__name__}: {exception.value}")
        record["extra"]["trace"] = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
                                    for f in traceback.extract_tb(exception.traceback)][-8:]
    record["exception"] = None


def _json_sink(stream: TextIO):
    def write(message: Any) -> None:
        record = message.record
        line: dict[str, Any] = {"ts": record["time"].isoformat(timespec="milliseconds"),
                                "level": record["level"].name.lower(), "event": record["message"],
                                "pid": record["process"].id}  # which worker of an instance
        line.update(record["extra"])
        stream.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        stream.flush()

    return write


def _text_format(record: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={{extra[{k}]}}" for k in record["extra"])
    return "<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {message} " + fields + "\n"


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """A thread ended with an exception: one scrubbed record, like every other."""
    if args.exc_type is SystemExit:
        return
    error = args.exc_value if args.exc_value is not None else args.exc_type()
    log.bind(thread=args.thread.name if args.thread else None).exception(
        "thread.failed", (args.exc_type, error, args.exc_traceback))
