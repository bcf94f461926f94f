"""The sandbox's default catalogue: realistic actions, the MCP conformance tools (on request), and who
sees what."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
from typing import Any, Callable

from .actions import Action, ActionError, Timing
from .contract import DEMO_KEY, DEMO_KEY_B
from .media import png, wav

Run = Callable[[dict[str, Any]], Any]


def _text_input(description: str, **extra_properties: Any) -> dict[str, Any]:
    """An input schema with a required ``text`` string (plus optional extra properties)."""
    return {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1, "description": description}, **extra_properties},
        "required": ["text"],
    }


NO_INPUT: dict[str, Any] = {"type": "object", "properties": {}}


def _action(
    name: str,
    title: str,
    description: str,
    kind: str,
    schema: dict[str, Any],
    run: Run,
    *,
    latency: str = "fast",
    stability: str = "stable",
    side_effects: tuple[str, ...] = (),
    timing: Timing | Callable[[dict[str, Any]], Timing] = Timing(),
    keys: frozenset[str] | None = None,
    done_status: str = "succeeded",
    cold_start: bool = False,
    **optional: Any,
) -> Action:
    """An Action whose entry has the required fields plus the ``optional`` ones it really has."""
    entry = {
        "name": name,
        "displayName": title,
        "description": description,
        "kind": kind,
        "inputSchema": schema,
        "sideEffects": list(side_effects),
        "stability": stability,
        "latencyClass": latency,
        **optional,
    }
    return Action(entry, run, timing, keys, done_status, cold_start)


def _digest(text: str) -> bytes:
    """A digest of any text JSON can carry (a lone surrogate too: JSON may escape one)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _returns(result: Any) -> Run:
    return lambda args: result


def _fails(error: str | dict[str, str]) -> Run:
    def run(args: dict[str, Any]) -> Any:
        raise ActionError(error)

    return run


# --- realistic actions --------------------------------------------------------------------------

_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant"]},
        "content": {"type": "string"},
    },
    "required": ["role", "content"],
}

_CHAT_INPUT = {
    "type": "object",
    "$defs": {"message": _MESSAGE},
    "properties": {
        "prompt": {"type": "string", "minLength": 1, "description": "A single user prompt."},
        "messages": {"type": "array", "items": {"$ref": "#/$defs/message"}, "minItems": 1},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 256},
    },
    "anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
}


def _chat(args: dict[str, Any]) -> dict[str, Any]:
    if "prompt" in args:
        prompt = args["prompt"]
    else:
        users = [m["content"] for m in args["messages"] if m["role"] == "user"]
        prompt = users[-1] if users else args["messages"][-1]["content"]
    reply = f'You said: "{prompt}". This is the ColabHive sandbox; no model was called.'
    asked, answered = len(prompt.split()), len(reply.split())
    return {
        "object": "chat.completion",
        "model": "hive-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": asked, "completion_tokens": answered, "total_tokens": asked + answered},
    }


def _embed(args: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(_digest(args["text"]))
    vector = [rng.gauss(0.0, 1.0) for _ in range(384)]
    norm = math.sqrt(sum(x * x for x in vector))
    return {"embedding": [round(x / norm, 6) for x in vector], "model": "text-embed-small", "dimensions": 384}


def _image(args: dict[str, Any]) -> dict[str, Any]:
    size = args["size"]
    return {"image_b64": _b64(png(size, size, args["prompt"])), "mime_type": "image/png"}


def _speech(args: dict[str, Any]) -> dict[str, Any]:
    frequency = 220 + _digest(args["text"])[0] * 2.5  # 220..857 Hz
    return {"audio_b64": _b64(wav(frequency, seconds=0.4)), "mime_type": "audio/wav"}


def _summarise(args: dict[str, Any]) -> dict[str, Any]:
    words = args["text"].split()
    return {"text": "Summary: " + " ".join(words[:12]) + (" …" if len(words) > 12 else "")}


def _report_timing(args: dict[str, Any]) -> Timing:
    return Timing.job(args["seconds"])


def _report(args: dict[str, Any]) -> dict[str, Any]:
    if args["fail"]:
        raise ActionError({"code": "report_failed", "message": "the report job failed (fail=true was asked)"})
    return {"text": f"report ready after {args['seconds']:g} s", "steps": _report_timing(args).steps}


def _create_contact(args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "ct_" + _digest(args["email"]).hex()[:12], "name": args["name"], "email": args["email"]}


def _scrape(args: dict[str, Any]) -> dict[str, Any]:
    return {"text": f"Sandbox copy of {args['url']}: nothing was fetched; this text stands in for the page."}


def _classifier(labels: tuple[str, ...]) -> Run:
    """A deterministic stand-in for a trained classifier: the label and score come from a hash."""

    def run(args: dict[str, Any]) -> dict[str, Any]:
        digest = _digest(args["text"])
        return {"label": labels[digest[0] % len(labels)], "score": round(0.5 + digest[1] / 510, 3)}

    return run


_CONTACT_OUTPUT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^ct_"},
        "name": {"type": "string"},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["id", "name", "email"],
}

_LABEL_OUTPUT = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["label", "score"],
}


def _realistic_actions() -> list[Action]:
    return [
        _action(
            "alpha-classifier", "Alpha ticket router",
            "Routes a support ticket to billing, support or sales (the alpha tenant's fine-tuned model).",
            "trained_model", _text_input("The ticket text."), _classifier(("billing", "support", "sales")),
            keys=frozenset({DEMO_KEY}), outputSchema=_LABEL_OUTPUT,
        ),
        _action(
            "batch-report", "Batch report",
            "Builds a report as a batch job that takes `seconds` to finish; `fail` makes it fail at the end.",
            "tool",
            {
                "type": "object",
                "properties": {
                    "seconds": {"type": "number", "minimum": 0, "maximum": 900, "default": 5},
                    "fail": {"type": "boolean", "default": False},
                },
                "additionalProperties": False,
            },
            _report, latency="batch", timing=_report_timing, done_status="completed",
        ),
        _action(
            "beta-sentiment", "Beta sentiment",
            "Classifies the sentiment of a text (the beta tenant's fine-tuned model).",
            "trained_model", _text_input("The text to classify."), _classifier(("positive", "negative", "neutral")),
            keys=frozenset({DEMO_KEY_B}), outputSchema=_LABEL_OUTPUT,
        ),
        _action(
            "cold-summarizer", "Cold summarizer",
            "Summarizes a text with a model that is unloaded when idle: the first call waits for a cold start.",
            "trained_model", _text_input("The text to summarize."), _summarise,
            latency="slow", cold_start=True, costHint="$0.40 / 1M tokens", side_effects=("billing",),
        ),
        _action(
            "crm-create-contact", "Create CRM contact",
            "Creates a contact in the tenant's CRM.",
            "operation",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "email": {"type": "string", "format": "email"},
                },
                "required": ["name", "email"],
            },
            _create_contact, side_effects=("writes",), outputSchema=_CONTACT_OUTPUT,
        ),
        _action(
            "echo", "Echo", "Returns its text unchanged.", "tool", _text_input("Any text."),
            lambda args: args["text"], annotations={"readOnlyHint": True},
        ),
        _action(
            "flaky-translate", "Flaky translate",
            "Translates a text into another language (its upstream model is currently broken).",
            "specialist",
            _text_input("The text to translate.", target_language={"type": "string", "default": "fr"}),
            _fails({"code": "model_error", "message": "upstream model crashed"}),
            latency="medium", stability="beta", timing=Timing.job(0.3, steps=1),
        ),
        _action(
            "hive-chat", "Hive chat",
            "Chat completion with the Hive general-purpose LLM: give a `prompt` or a list of `messages`.",
            "llm", _CHAT_INPUT, _chat, costHint="$0.15 / 1M tokens", side_effects=("billing",),
        ),
        _action(
            "image-gen-tiny", "Tiny image generator",
            "Generates a small square PNG image from a prompt.",
            "generative",
            {
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "minLength": 1},
                    "size": {"type": "integer", "minimum": 16, "maximum": 256, "default": 64},
                },
                "required": ["prompt"],
            },
            _image, latency="medium", timing=Timing.job(0.5, steps=2), costHint="$0.002 / image",
            side_effects=("billing",),
        ),
        _action(
            "text-embed-small", "Small text embedding",
            "Embeds a text as a 384-dimension unit vector.",
            "model", _text_input("The text to embed."), _embed, costHint="$0.02 / 1M tokens", side_effects=("billing",),
        ),
        _action(
            "tts-voice", "Text to speech",
            "Speaks a text aloud and returns a WAV file.",
            "generative", _text_input("The text to speak."), _speech,
            latency="medium", timing=Timing.job(0.3, steps=1),
        ),
        _action(
            "web-scrape", "Web scrape",
            "Fetches a web page and returns its text.",
            "tool",
            {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}}, "required": ["url"]},
            _scrape, latency="medium", stability="experimental", side_effects=("external_network",),
            timing=Timing.job(0.2, steps=1),
        ),
    ]


# --- MCP conformance-suite tools (results already in MCP content-block shape) --------------------


def _text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _image_block() -> dict[str, str]:
    return {"type": "image", "data": _b64(png(16, 16, "conformance")), "mimeType": "image/png"}


def _resource_block(uri: str, mime_type: str, text: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


def _content(*blocks: dict[str, Any]) -> Run:
    return _returns({"content": list(blocks)})


_JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def _conformance(
    name: str, description: str, run: Run, schema: dict[str, Any] = NO_INPUT, timing: Timing = Timing()
) -> Action:
    title = name.replace("_", " ").capitalize()
    return _action(name, title, description, "tool", schema, run, timing=timing)


def _conformance_actions() -> list[Action]:
    return [
        _conformance(
            "json_schema_2020_12_tool", "Echoes its input; the input schema uses JSON Schema 2020-12 keywords.",
            lambda args: {"content": [_text_block(json.dumps(args, sort_keys=True))]}, _JSON_SCHEMA_2020_12,
        ),
        _conformance(
            "test_audio_content", "Returns an audio content block (a WAV tone).",
            _content({"type": "audio", "data": _b64(wav(440.0, seconds=0.25)), "mimeType": "audio/wav"}),
        ),
        _conformance(
            "test_embedded_resource", "Returns an embedded text resource.",
            _content(_resource_block("test://embedded-resource", "text/plain", "This is an embedded resource content.")),
        ),
        _conformance(
            "test_error_handling", "Always fails, to test error reporting.",
            _fails("This tool intentionally returns an error for testing"),
        ),
        _conformance("test_image_content", "Returns an image content block (a PNG).", _content(_image_block())),
        _conformance(
            "test_multiple_content_types", "Returns text, image and resource content blocks together.",
            _content(
                _text_block("Multiple content types test:"),
                _image_block(),
                _resource_block("test://mixed-content-resource", "application/json", '{"test": "data", "value": 123}'),
            ),
        ),
        _conformance(
            "test_reconnection", "A two-second job, long enough to test stream reconnection.",
            _content(_text_block("Reconnection test completed successfully.")), timing=Timing.job(2.0, steps=3),
        ),
        _conformance(
            "test_simple_text", "Returns a simple text content block.",
            _content(_text_block("This is a simple text response for testing.")),
        ),
        _conformance(
            "test_tool_with_logging", "A short job whose status changes several times (for log messages).",
            _content(_text_block("Tool with logging completed.")), timing=Timing.job(1.5, steps=4),
        ),
        _conformance(
            "test_tool_with_progress", "A short job that reports progress step by step.",
            _content(_text_block("Tool with progress completed.")), timing=Timing.job(1.5, steps=4),
        ),
    ]


def default_actions(conformance: bool = False) -> list[Action]:
    """A fresh copy of the default catalogue; ``conformance`` adds the conformance suite's tools."""
    return _realistic_actions() + (_conformance_actions() if conformance else [])
