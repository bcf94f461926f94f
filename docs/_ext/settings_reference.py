"""The configuration reference, generated from the settings table (``colabhive_mcp.settings.config.SETTINGS``).

``.. colabhive-settings::`` emits one entry per field of :class:`colabhive_mcp.settings.config.Config`: its
help, command-line flag, environment variable, file key, the names colabhive-mcp 0.3.4 gave it, and
its default, all read from the field's metadata at build time. A setting added to settings/config.py is in
the next build of the docs; nothing here names a setting.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

MIB = 1 << 20
SCOPES = {"all": "every mode", "stdio": "the stdio server", "http": "the HTTP server (serve)"}


def is_flag(field: dataclasses.Field) -> bool:
    """A plain on/off setting: ``--name`` and ``--no-name`` (as the CLI builds it)."""
    return field.type in (bool, "bool", "bool | None")


def default_text(field: dataclasses.Field) -> str:
    """The default as a user writes it (a TOML-ish value), or how the server picks one."""
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        shown = ",".join(v if isinstance(v, str) else f"{v[0]}={v[1]:g}" for v in value)
        return shown or "empty"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f"{value} ({value // MIB} MiB)"
    return str(value)


def describe(field: dataclasses.Field) -> dict[str, Any]:
    """Everything the reference says about one setting, from the field alone."""
    meta = field.metadata
    dashed = field.name.replace("_", "-")
    metavar = meta["metavar"] or "N"
    flags = [f"--{dashed}", f"--no-{dashed}"] if is_flag(field) else [f"--{dashed} {metavar}"]
    aliases = meta["aliases"]
    old = ([f"--{a.replace('_', '-')}" for a in aliases] + [f"COLABHIVE_{a.upper()}" for a in aliases]
           + list(aliases))
    example = meta["example"]
    if isinstance(example, tuple):
        example = ",".join(example)
    return {
        "name": field.name,
        "anchor": f"setting-{dashed}",
        "help": meta["help"],
        "flags": flags,
        "env": meta["env"],
        "file_key": field.name,
        "aliases": old,
        "default": default_text(field),
        "example": None if example is None or field.default is not None else str(example),
        "secret": meta["secret"],
        "credential": dashed if meta["secret"] else None,
        "scope": SCOPES.get(meta.get("scope") or "", meta.get("scope")),  # where the table says which mode
    }


def _literals(values: list[str]) -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for i, value in enumerate(values):
        if i:
            out.append(nodes.Text(", "))
        out.append(nodes.literal(text=value))
    return out


def _field(name: str, *body: nodes.Node) -> nodes.field:
    paragraph = nodes.paragraph()
    paragraph.extend(body)
    return nodes.field("", nodes.field_name(text=name), nodes.field_body("", paragraph))


def entry(row: dict[str, Any]) -> nodes.definition_list_item:
    """One setting as docutils nodes (built directly: a help text is never parsed as markup)."""
    term = nodes.term("", "", nodes.literal(text=row["name"]), ids=[row["anchor"]])
    fields = nodes.field_list()
    if row["scope"]:
        fields += _field("applies to", nodes.Text(row["scope"]))
    fields += _field("flag", *_literals(row["flags"]))
    if row["env"]:
        fields += _field("environment", nodes.literal(text=row["env"]))
    fields += _field("file key", nodes.literal(text=row["file_key"]))
    default = [nodes.literal(text=row["default"])]
    if row["example"]:
        default += [nodes.Text(" (for example "), nodes.literal(text=row["example"]), nodes.Text(")")]
    fields += _field("default", *default)
    if row["aliases"]:
        fields += _field("0.3.4 names", *_literals(row["aliases"]))
    if row["secret"]:
        fields += _field("secret", nodes.Text("never printed by "), nodes.literal(text="colabhive-mcp config"),
                         nodes.Text("; also read from "), nodes.literal(text=f"$CREDENTIALS_DIRECTORY/{row['credential']}"),
                         nodes.Text(" (systemd's "), nodes.literal(text="LoadCredential="),
                         nodes.Text(") when the environment does not set it"))
    definition = nodes.definition("", nodes.paragraph(text=row["help"][:1].upper() + row["help"][1:] + "."), fields)
    return nodes.definition_list_item("", term, definition)


class SettingsReference(SphinxDirective):
    """``.. colabhive-settings::``: every setting of the table, in its order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from colabhive_mcp.settings import config

        self.env.note_dependency(str(Path(config.__file__).resolve()))
        listing = nodes.definition_list(classes=["colabhive-settings"])
        for field in config.SETTINGS:
            item = entry(describe(field))
            self.state.document.note_explicit_target(item[0])
            listing += item
        return [listing]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("colabhive-settings", SettingsReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
