"""Invocation results as MCP ``CallToolResult`` objects.

One function per direction of travel: :func:`tool_result` for a terminal invocation,
:func:`error_result` for anything that went wrong before or around it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..catalog.schemas import Check
from ..gateway.client import GatewayError
from ..invocation import Invocation
from ..logs import log
from ..revisions import revision
from .polling import progress_percent, status_message

EMBEDDING_PREVIEW = 8
CONTINUATION = "com.colabhive/continuation"  # result _meta: the call that gets the result of work still running
LIMIT = "com.colabhive/limit"  # result _meta: the limit that refused a call, its figures, and retryAfter


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def error_result(message: str) -> dict[str, Any]:
    """A tool execution error the model can read and act on."""
    return {"content": [text(message)], "isError": True}


def limit_result(message: str, facts: dict[str, Any]) -> dict[str, Any]:
    """A call a limit refused: the words for the model, the figures (``retryAfter`` among them) for programs."""
    return {**error_result(message), "_meta": {LIMIT: facts}}


def stopped_result(tool_name: str) -> dict[str, Any]:
    """The answer to a call the server stopped because it is itself stopping (its work is cancelled)."""
    return error_result(f"The ColabHive MCP server is restarting or stopping: {tool_name!r} was stopped and "
                        "cancelled on ColabHive before it finished. Please try again.")


def continuation_result(invocation: Invocation, tool_name: str, next_call: dict[str, Any],
                        checked: bool) -> dict[str, Any]:
    """The answer when the work outlives the wait (its host's deadline is near, or the wait ran
    out): not a failure. It says where the work stands and names the exact call that gets the
    result, in words for the model and in ``_meta`` for programs.

    ``checked``: the tool declares an ``outputSchema``, and clients that check it (the TypeScript SDK)
    reject a plain result without ``structuredContent``: it is then marked ``isError`` to pass.
    """
    percent = progress_percent(invocation)
    where = status_message(invocation) + (f", {percent:g} %" if percent is not None else "")
    invocation_id = invocation.id
    arguments = json.dumps(next_call["arguments"], ensure_ascii=False)
    result: dict[str, Any] = {
        "content": [text(f"ColabHive is still working on {tool_name!r} (invocation {invocation_id}: {where}). "
                         f"This is not a failure: the work goes on. To get its result, call {next_call['tool']} "
                         f"with {arguments}; it returns the result as {tool_name!r} would have.")],
        "_meta": {CONTINUATION: {**next_call, "invocation_id": invocation_id, "status": invocation.status,
                                 "progress": percent}}}
    if checked:
        result["isError"] = True
    return result


def unknown_result(tool_name: str, invocation_id: str | None, why: str, hint: str) -> dict[str, Any]:
    """The answer when a call's work exists upstream but nobody knows where it stands: an error
    that names the invocation and says how to follow it up, so that nobody runs it twice."""
    return error_result(f"Tool {tool_name!r} started on ColabHive (invocation {invocation_id}), but {why}, so its "
                        f"state is unknown: it may still be running, or have finished; do not run it again. {hint}")


def tool_result(invocation: Invocation, tool_name: str, version: str,
                output_check: Check | None = None) -> dict[str, Any]:
    """The ``CallToolResult`` for a terminal invocation, as ``version`` can carry it."""
    if invocation.succeeded:
        result = success_result(invocation.result, output_check, tool_name)
    elif invocation.status == "cancelled":
        result = error_result(f"Tool {tool_name!r} was cancelled before it finished.")
    else:
        result = error_result(f"Tool {tool_name!r} failed: {failure_message(invocation.error)}")
    return for_version(result, version)


def success_result(value: Any, output_check: Check | None, tool_name: str) -> dict[str, Any]:
    """Content blocks for every result shape of the gateway contract."""
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return _native(value)
    blocks = _blocks(value)
    result: dict[str, Any] = {"content": blocks}
    if output_check is None:
        return result
    if not isinstance(value, dict) or any(key.endswith("_b64") for key in value):
        problem = "it is not a JSON object" if not isinstance(value, dict) else "it carries binary data"
    else:
        problems = output_check.problems(value)
        if not problems:
            result["structuredContent"] = value  # with its JSON text above, for clients that read text only
            return result
        problem = problems[0]
    # A tool with an outputSchema must return matching structured content; clients reject less.
    log.bind(tool=tool_name, error=problem).warning("result.output_schema_mismatch")
    notice = text(f"(The action's result does not match the output schema {tool_name!r} declares: {problem}.)")
    return {"content": blocks + [notice], "isError": True}


def _blocks(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return [text("(the action returned no result)")]
    if isinstance(value, str):
        return [text(value)]
    if isinstance(value, dict):
        chat = _chat_text(value)
        if chat is not None:
            return [text(chat)]
        if isinstance(value.get("text"), str):
            return [text(value["text"])]
        if _is_vector(value.get("embedding")):
            return [text(embedding_summary(value["embedding"]))]
        if isinstance(value.get("image_b64"), str):
            return [{"type": "image", "data": value["image_b64"], "mimeType": value.get("mime_type", "image/png")}]
        if isinstance(value.get("image_url"), str):
            return [text(f"Image: {value['image_url']}")]
        if isinstance(value.get("audio_b64"), str):
            return [{"type": "audio", "data": value["audio_b64"], "mimeType": value.get("mime_type", "audio/wav")}]
    return [text(json.dumps(value, ensure_ascii=False, indent=2))]


def _chat_text(value: dict[str, Any]) -> str | None:
    choices = value.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    texts = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else choice.get("text")
        if isinstance(content, str):
            texts.append(content)
    return "\n\n".join(texts) if texts else None


def _is_vector(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)


def embedding_summary(vector: list[float]) -> str:
    norm = math.sqrt(sum(x * x for x in vector))
    head = ", ".join(f"{x:.4f}" for x in vector[:EMBEDDING_PREVIEW])
    return f"Embedding: {len(vector)} dimensions, L2 norm {norm:.4f}, first values [{head}{', …' if len(vector) > EMBEDDING_PREVIEW else ''}]"


def _native(value: dict[str, Any]) -> dict[str, Any]:
    """An MCP-native result from the gateway: keep its blocks, drop anything malformed."""
    blocks = [b for b in value["content"] if isinstance(b, dict) and isinstance(b.get("type"), str)]
    result: dict[str, Any] = {"content": blocks or [text("(the action returned no content)")]}
    if isinstance(value.get("structuredContent"), dict):
        result["structuredContent"] = value["structuredContent"]
    if value.get("isError") is True:
        result["isError"] = True
    return result


def fit(result: dict[str, Any], max_text_chars: int, max_image_bytes: int) -> dict[str, Any]:
    """Keep a result within a client's budget: long text is cut with a visible notice, and an
    image too large to inline is replaced by a short description."""
    blocks = []
    for block in result.get("content", []):
        if block.get("type") == "text" and len(block.get("text", "")) > max_text_chars:
            full = block["text"]
            block = text(full[:max_text_chars] + f"\n\n[… truncated: {max_text_chars} of {len(full)} characters shown]")
        elif block.get("type") == "image" and len(block.get("data", "")) * 3 // 4 > max_image_bytes:
            size = len(block["data"]) * 3 // 4
            block = text(f"[{block.get('mimeType', 'image')} of about {size} bytes not shown: this client takes "
                         f"images up to {max_image_bytes} bytes]")
        blocks.append(block)
    return {**result, "content": blocks}


def failure_message(error: str | dict[str, Any] | None) -> str:
    """A readable sentence from the gateway's ``error`` field (text or ``{code, message}``)."""
    if isinstance(error, str) and error:
        return error
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or "unknown error"
        return f"{message} ({error['code']})" if error.get("code") else str(message)
    return "the action failed without saying why"


def for_version(result: dict[str, Any], version: str) -> dict[str, Any]:
    """Downgrade a result for older revisions: unknown block types become text, no structuredContent."""
    facts = revision(version)
    if not facts.structured_content:
        result = {k: v for k, v in result.items() if k != "structuredContent"}
    if facts.block_types is not None:
        allowed = facts.block_types
        result = {**result, "content": [b if b["type"] in allowed else text(_describe_block(b))
                                        for b in result["content"]]}
    return result


def _describe_block(block: dict[str, Any]) -> str:
    if block["type"] == "resource_link":
        return f"Resource: {block.get('uri', '')}"
    return f"({block['type']} content of type {block.get('mimeType', 'unknown')}, not supported by this client's protocol version)"


def gateway_failure(tool: str, exc: GatewayError) -> str:
    """What the model is told when the gateway refused or failed a call."""
    if exc.status == 404:
        return f"Tool {tool!r} no longer exists on ColabHive or is not visible to this API key."
    if exc.status == 422:
        return f"ColabHive rejected the input for {tool!r}: {exc.message.removeprefix('422 ')}"
    if exc.status == 429:
        wait = f" Retry after {exc.retry_after:g} s." if exc.retry_after is not None else ""
        return f"ColabHive is rate-limiting this API key (429).{wait}"
    return f"Tool {tool!r} could not be run: ColabHive gateway error: {exc.message}"
