"""What a host is shown: manifest entries as MCP tools, the built-in tools, schemas every host
accepts, the policy that filters them, and the profiles of known hosts."""
