"""``python -m colabhive_mcp``: the ``colabhive-mcp`` command."""

from .cli import main

raise SystemExit(main())
