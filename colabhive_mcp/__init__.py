"""colabhive-mcp: the ColabHive Builder Gateway as Model Context Protocol tools."""

__version__ = "0.1.0"
