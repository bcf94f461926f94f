"""colabhive-mcp: the ColabHive Builder Gateway as Model Context Protocol tools."""

__version__ = "1.0.0"
