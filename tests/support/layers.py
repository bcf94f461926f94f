"""The package's wings and the one order they stand in, checked against the code's own imports.

A module may import the leaves at the top level, its own wing, and the wings of lower layers; never a
wing of its own layer or a higher one, and nothing may make a circle (type-only imports count too).
The protocol core also imports nothing of the gateway client; the sandbox imports nothing of the rest,
and any wing may use it (the demo does).
Run it to print the order and whatever breaks it: ``python tests/support/layers.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "colabhive_mcp"

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (  # lowest first
    "leaves", "settings", "store gateway", "manifest", "catalog", "calls", "tenants", "protocol oauth",
    "transports", "cli", "__main__"))
NEVER = {("protocol", "gateway"): "the protocol core knows nothing of the gateway client"}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def wing(module: str) -> str:
    """``colabhive_mcp.calls.polling`` is of the wing ``calls``; a top-level module is a leaf."""
    parts = module.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return "__main__" if module.endswith("__main__") else "leaves"


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, wherever the import stands."""
    own = module_of(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    return {name for name in found if name in modules and name != own}


def graph() -> dict[str, set[str]]:
    paths = {module_of(path): path for path in PACKAGE.rglob("*.py")}
    return {module: imports(path, set(paths)) for module, path in paths.items()}


def why_not(here: str, there: str) -> str:
    """Why a module of wing ``here`` may not import one of wing ``there`` ("" when it may)."""
    if here == there:
        return ""
    if here == "sandbox":
        return "the sandbox stands apart"
    if there in ("leaves", "sandbox"):
        return ""
    if (here, there) in NEVER:
        return NEVER[(here, there)]
    layers = {name: number for number, layer in enumerate(LAYERS) for name in layer}
    if here not in layers or there not in layers:
        return f"{here if here not in layers else there} has no place in LAYERS"
    if layers[there] == layers[here]:
        return "a wing of the same layer"
    return "a higher layer" if layers[there] > layers[here] else ""


def breaks(edges: dict[str, set[str]]) -> list[str]:
    """Every import that runs against the order, or that a rule forbids."""
    return [f"{module} imports {target}: {why}" for module, targets in sorted(edges.items())
            for target in sorted(targets) if (why := why_not(wing(module), wing(target)))]


def circles(edges: dict[str, set[str]]) -> list[str]:
    """The modules that reach themselves through their imports."""
    def reaches(start: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            name = todo.pop()
            if name == start:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(edges[name])
        return False
    return sorted(module for module in edges if reaches(module))


def main() -> int:
    edges = graph()
    print("  >  ".join(", ".join(sorted(layer)) for layer in reversed(LAYERS)), "(sandbox: apart)")
    problems = breaks(edges) + [f"{module} is in a circle of imports" for module in circles(edges)]
    print("\n".join(problems) or "every import runs down the layers; no circle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
