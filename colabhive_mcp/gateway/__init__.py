"""The Builder Gateway's client: its requests and what its answers mean; it knows nothing of MCP."""
