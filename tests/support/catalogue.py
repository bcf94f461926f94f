"""Actions some tests add to the sandbox's catalogue."""

# a slow action with a side effect: it is confirmed first, and runs as a task
WRITER = {"name": "slow-writer", "description": "writes something, slowly", "latencyClass": "slow",
          "sideEffects": ["writes"], "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
