"""What each MCP revision this server speaks can carry: one table, the only place that knows.

Every difference between revisions that changes what the server sends is a field of
:class:`Revision`, read as ``revision(version).field``; no other module compares version strings.
The table sits below the protocol core (:mod:`.protocol.eras` names the eras and reads messages),
so that the catalogue (:mod:`.catalog.tools`) and results (:mod:`.calls.results`) can read it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_FIELDS_2024 = ("name", "description", "inputSchema")
_FIELDS_2025_03 = _FIELDS_2024 + ("annotations",)
_FIELDS_2025_06 = _FIELDS_2025_03 + ("title", "outputSchema", "_meta")
_BLOCKS_2024 = frozenset({"text", "image", "resource"})


@dataclass(frozen=True)
class Revision:
    """What one MCP protocol revision can carry: its era, tool fields, content blocks and the rest."""

    version: str
    modern: bool = False  # stateless, every request carrying its _meta (else: the initialize handshake)
    tool_fields: tuple[str, ...] = _FIELDS_2025_06 + ("icons",)  # what a tool definition may hold
    block_types: frozenset[str] | None = None  # the content blocks a result may hold (None: every type)
    structured_content: bool = True  # a result's structuredContent (and outputSchema)
    server_info: tuple[str, ...] = ("name", "title", "version", "description", "websiteUrl")
    progress_message: bool = True  # notifications/progress carries a message
    batches: bool = False  # JSON-RPC batches
    core_tasks: bool = False  # 2025-11-25's experimental tasks (tools/call with params.task, tasks/*)
    elicitation_mode: bool = False  # elicitation/create says mode "form"
    resumable: bool = False  # SSE answers with event ids, resumed with GET + Last-Event-ID


REVISIONS = {r.version: r for r in (
    Revision("2026-07-28", modern=True, elicitation_mode=True),
    Revision("2025-11-25", tool_fields=_FIELDS_2025_06 + ("icons", "execution"), core_tasks=True,
             elicitation_mode=True, resumable=True),
    Revision("2025-06-18", tool_fields=_FIELDS_2025_06, server_info=("name", "title", "version")),
    Revision("2025-03-26", tool_fields=_FIELDS_2025_03, block_types=_BLOCKS_2024 | {"audio"},
             structured_content=False, server_info=("name", "version"), batches=True),
    Revision("2024-11-05", tool_fields=_FIELDS_2024, block_types=_BLOCKS_2024, structured_content=False,
             server_info=("name", "version"), progress_message=False),
)}


def revision(version: str) -> Revision:
    """The facts of ``version``, one this server speaks."""
    return REVISIONS[version]


def versions(having: Callable[[Revision], bool]) -> tuple[str, ...]:
    """The versions whose facts satisfy ``having``, newest first."""
    return tuple(v for v, r in REVISIONS.items() if having(r))


MODERN_VERSIONS = versions(lambda r: r.modern)
LEGACY_VERSIONS = versions(lambda r: not r.modern)  # newest first: the default
SUPPORTED_VERSIONS = MODERN_VERSIONS + LEGACY_VERSIONS
BATCH_VERSIONS = versions(lambda r: r.batches)
TASKS_VERSIONS = versions(lambda r: r.core_tasks)
