"""Tenants: one key's state, the hosted mode's pool of them, what the tenants of one instance share,
and the per-key limits."""
