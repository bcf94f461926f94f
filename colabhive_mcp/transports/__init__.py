"""The transports, thin adapters over the protocol core: stdio, and HTTP (both eras, and 2024-11-05)."""
