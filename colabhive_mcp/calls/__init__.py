"""Tool calls: one call from its start to its answer, its polling of the gateway, calls cut off by
their hosts, why a call stopped, and its result as MCP content."""
