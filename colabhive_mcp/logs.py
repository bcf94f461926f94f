"""Structured logging on stderr with loguru, and the redaction every record goes through.

Events are log records whose message is the event name (``manifest.fetched``) and whose
fields are bound extras. JSON lines by default; readable text when stderr is a terminal.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import traceback
from typing import Any, TextIO

from loguru import logger

log = logger

_SECRET = re.compile(r"(hive_[A-Za-z0-9_\-]{4,})|((?i:bearer)\s+[A-Za-z0-9._~+/=\-]{4,})")


def redact(text: str) -> str:
    """Replace anything that looks like an API key or bearer token."""
    return _SECRET.sub(lambda m: "hive_…redacted" if m.group(1) else "Bearer …redacted", text)


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
    logger.opt(exception=(args.exc_type, error, args.exc_traceback)).bind(
        thread=args.thread.name if args.thread else None).error("thread.failed")


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None, file: str | None = None) -> None:
    """Send all logs to ``stream`` (stderr by default), or appended to ``file``, as JSON lines or
    text; nothing ever goes to stdout. Raises ``OSError`` when ``file`` cannot be opened."""
    stream = open(file, "a", encoding="utf-8", buffering=1) if file else stream or sys.stderr
    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
    logger.remove()
    logger.configure(patcher=_scrub)
    threading.excepthook = _thread_failed  # never a raw traceback on stderr, even from a helper thread
    if fmt == "json":
        logger.add(_json_sink(stream), level=level.upper(), format="{message}", backtrace=False, diagnose=False)
    else:
        logger.add(stream, level=level.upper(), format=_text_format, colorize=None, backtrace=False, diagnose=False)
