"""What a client hears while its call waits: progress notifications for its token, and log
messages when it asked for them."""

from __future__ import annotations

from typing import Any, Callable

from ..calls.polling import ProgressTracker, Update, status_message
from ..revisions import revision
from .request import Request


def reporter(request: Request) -> Callable[[Update], None] | None:
    """Turn invocation updates into progress notifications and/or log messages for this request."""
    token = request.progress_token
    if token is None and not request.wants_log("info"):
        return None
    tracker = ProgressTracker()
    with_message = revision(request.version).progress_message

    def report(update: Update) -> None:
        value, total, message = tracker.advance(update)
        if token is not None:
            params: dict[str, Any] = {"progressToken": token, "progress": value, "total": total}
            if with_message:
                params["message"] = message
            request.send("notifications/progress", params)
        if request.wants_log("info"):
            request.send("notifications/message", {"level": "info", "logger": "colabhive",
                                                   "data": f"{request.frame.name}: {status_message(update)}"})

    return report
