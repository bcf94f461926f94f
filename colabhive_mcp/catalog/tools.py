"""Manifest entries as MCP tools: names, descriptions, schemas, annotations, and the catalog.

A :class:`Catalog` is built once per manifest version and policy; listing it for a given
protocol revision is a dictionary lookup afterwards.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..encoding import EncodedList, to_json
from ..manifest import interning
from ..manifest.version import Manifest
from ..revisions import LEGACY_VERSIONS, revision
from .policy import Policy, side_effects
from .profiles import UNKNOWN, Profile
from .schemas import Check, portable

SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]+")
META_PREFIX = "com.colabhive/"
RESERVED_PREFIX = "colabhive__"  # built-in tools; a slug starting with it never keeps its name
LISTED_WHEN_CAPPED = "x-colabhive-listed-when-capped"  # a built-in shown only when the list is capped
NEVER_LISTED = "x-colabhive-never-listed"  # a built-in kept callable under a former name
LONG_RUNNING = frozenset({"slow", "batch"})  # latency classes that may run as tasks
NEWEST_FIELDS = revision(LEGACY_VERSIONS[0]).tool_fields  # what most clients' lists hold (the default revision's)
LATENCY_NOTES = {
    "slow": "Slow: the first call may take minutes while the model loads; progress is reported meanwhile.",
    "batch": "Batch job: may run for minutes; progress is reported meanwhile.",
}



def tool_name(slug: str, limit: int) -> str:
    """An MCP-safe name for ``slug``: the slug itself when it is safe and short enough,
    else a sanitised, truncated form with a short hash of the slug, stable across processes."""
    if SAFE_NAME.fullmatch(slug) and len(slug) <= limit and not slug.startswith(RESERVED_PREFIX):
        return slug
    digest = hashlib.sha256(slug.encode("utf-8")).hexdigest()[:8]
    base = UNSAFE_CHARS.sub("_", slug).strip("_") or "tool"
    return f"{base[:max(1, limit - len(digest) - 1)]}_{digest}"


@dataclass(frozen=True)
class Tool:
    """One exposed action: its MCP name, its manifest entry and its MCP definition."""

    name: str
    entry: dict[str, Any]
    definition: dict[str, Any]
    refusal: str | None = None
    builtin: bool = False

    @property
    def slug(self) -> str:
        return self.entry["name"]

    @property
    def long_running(self) -> bool:
        return self.entry.get("latencyClass") in LONG_RUNNING and not self.builtin

    @cached_property
    def _input_check(self) -> Check | None:
        """Arguments are judged by the gateway's own schema, not the portable copy clients see."""
        original = self.entry.get("inputSchema")
        check = Check(original if isinstance(original, dict) and original else self.definition["inputSchema"])
        return None if check.broken else check  # the gateway will judge input that we cannot

    @cached_property
    def output_check(self) -> Check | None:
        """The declared ``outputSchema``, compiled once; None when the tool declares none."""
        schema = self.definition.get("outputSchema")
        return None if schema is None else Check(schema)

    def argument_errors(self, arguments: dict[str, Any]) -> str | None:
        """A sentence naming what is wrong with ``arguments``, or ``None`` when they fit the schema."""
        problems = self._input_check.problems(arguments) if self._input_check else []
        if not problems:
            return None
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return f"Invalid arguments for tool {self.name!r}: " + "; ".join(problems[:3]) + more


def prepared(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A manifest entry as a fetch prepares it while the next page is on its way: interned
    (:func:`interning.entry`), and its tool definition built and encoded as most clients are shown it
    (the default profile's: names of up to 48 characters, schemas as they are; the newest handshake
    revision's fields), which a catalogue and its listing then find made."""
    digest, kept = interning.entry(entry)
    name = tool_name(kept["name"], UNKNOWN.name_max)
    spelled(digest, name, UNKNOWN.strict_schemas, NEWEST_FIELDS,
            definition(digest, kept, name, UNKNOWN.strict_schemas))
    return digest, kept


def spelled(digest: str, name: str, strict: bool, fields: tuple[str, ...],
            definition: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """A tool definition (of the entry of ``digest``, under a name and strictness) with only the
    ``fields`` a revision knows, and its JSON: made once per process, whichever tenant asks."""
    def spell() -> tuple[dict[str, Any], bytes]:
        tool = {k: definition[k] for k in fields if k in definition}
        return tool, to_json(tool)

    return interning.built((digest, name, strict, fields), spell)


def definition(digest: str, entry: dict[str, Any], name: str, strict: bool) -> dict[str, Any]:
    """The tool definition of an entry (of ``digest``) under a name and strictness: built once per
    process, whichever tenant asks."""
    return interning.built((digest, name, strict), lambda: build_definition(entry, name, strict))


def build_definition(entry: dict[str, Any], name: str, strict: bool = False) -> dict[str, Any]:
    """The full (newest-revision) MCP tool definition of one manifest entry."""
    definition: dict[str, Any] = {"name": name}
    if isinstance(entry.get("displayName"), str):
        definition["title"] = entry["displayName"]
    definition["description"] = describe(entry)
    definition["inputSchema"] = portable(entry.get("inputSchema"), strict)
    output = entry.get("outputSchema")
    if isinstance(output, dict) and output.get("type") == "object":
        definition["outputSchema"] = output
    definition["annotations"] = tool_annotations(entry)
    if entry.get("latencyClass") in LONG_RUNNING:
        definition["execution"] = {"taskSupport": "optional"}
    meta = {META_PREFIX + key: entry[key] for key in ("kind", "latencyClass", "stability", "costHint", "sideEffects")
            if key in entry}
    meta[META_PREFIX + "slug"] = entry["name"]
    definition["_meta"] = meta
    return definition


def describe(entry: dict[str, Any]) -> str:
    """The description a model reads: the gateway's text plus side effects, latency and cost."""
    text = entry.get("description") or entry.get("displayName") or f"ColabHive action {entry['name']}."
    notes = []
    effects = side_effects(entry)
    if effects:
        notes.append(f"Side effects: {', '.join(effects)}.")
    if entry.get("latencyClass") in LATENCY_NOTES:
        notes.append(LATENCY_NOTES[entry["latencyClass"]])
    if isinstance(entry.get("costHint"), str):
        notes.append(f"Cost: {entry['costHint']}.")
    if entry.get("stability") in ("experimental", "beta"):
        notes.append(f"Stability: {entry['stability']}.")
    return text.strip() + ("\n\n" + " ".join(notes) if notes else "")


def tool_annotations(entry: dict[str, Any]) -> dict[str, Any]:
    """The gateway's own annotations, else hints derived from ``sideEffects`` (conservative when unknown)."""
    given = entry.get("annotations")
    if isinstance(given, dict) and given:
        result = dict(given)
    else:
        effects = side_effects(entry)
        if effects == []:
            result = {"readOnlyHint": True, "openWorldHint": False}
        else:
            result = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                      "openWorldHint": effects is None or "external_network" in effects}
    if isinstance(entry.get("displayName"), str):
        result.setdefault("title", entry["displayName"])
    return result


@dataclass
class Catalog:
    """The tools of one manifest version under one policy, in a deterministic order."""

    manifest: Manifest
    policy: Policy
    profile: Profile
    builtins: tuple[dict[str, Any], ...] = ()
    by_name: dict[str, Tool] = field(init=False)
    by_slug: dict[str, Tool] = field(init=False)
    exposed: list[Tool] = field(init=False)
    shown: list[Tool] = field(init=False)
    _digests: dict[str, str] = field(init=False, repr=False)
    _listings: dict[str, EncodedList] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name = {}
        self._digests: dict[str, str] = {}
        strict = self.profile.strict_schemas
        for digest, entry in zip(self.manifest.digests, self.manifest.entries):
            name = tool_name(entry["name"], self.profile.name_max)
            if name not in self.by_name:  # a duplicate slug: the first entry wins
                self._add(Tool(name, entry, definition(digest, entry, name, strict), self.policy.refusal(entry)), digest)
        self.by_slug = {t.slug: t for t in self.by_name.values()}
        for entry in self.builtins:
            digest = interning.digest(entry)
            self._add(Tool(entry["name"], entry, definition(digest, entry, entry["name"], strict),
                           self.policy.refusal(entry, builtin=True), builtin=True), digest)
        self.exposed = sorted((t for t in self.by_name.values() if t.refusal is None), key=lambda t: t.name)
        self.shown = self._shown()

    def _add(self, tool: Tool, digest: str) -> None:
        self.by_name[tool.name] = tool
        self._digests[tool.name] = digest

    def _shown(self) -> list[Tool]:
        """What ``tools/list`` shows: everything, or — past the profile's cap — the built-ins
        (search included) and the first tools by name; the others stay callable."""
        cap = self.profile.max_tools
        listable = [t for t in self.exposed if not t.entry.get(NEVER_LISTED)]
        if not cap or len(listable) <= cap:
            return [t for t in listable if not t.entry.get(LISTED_WHEN_CAPPED)]
        builtins = [t for t in listable if t.builtin]
        actions = [t for t in listable if not t.builtin][:max(0, cap - len(builtins))]
        return sorted(builtins + actions, key=lambda t: t.name)

    def listing(self, version: str) -> EncodedList:
        """The exposed tool definitions as ``version`` spells them (built once per version)."""
        listing = self._listings.get(version)
        if listing is None:
            fields = revision(version).tool_fields
            strict = self.profile.strict_schemas
            listing = EncodedList.joined([spelled(self._digests[t.name], t.name, strict, fields, t.definition)
                                          for t in self.shown])
            self._listings[version] = listing  # a racing thread builds the same list: harmless
        return listing
