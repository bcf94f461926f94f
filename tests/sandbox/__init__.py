"""Tests of the sandbox Builder Gateway (colabhive_mcp.sandbox)."""
