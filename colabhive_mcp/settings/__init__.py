"""Settings: where each comes from (flags, a file, the environment, 0.3.4's names), how it is read,
and the one :class:`~colabhive_mcp.settings.config.Config` they make."""
