"""A key's manifest: one version of it, the cache that keeps it fresh, the copy an instance's
workers share, the copy saved between two starts, and the entries shared between keys."""
