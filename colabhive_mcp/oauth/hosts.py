"""Which hosts are this machine (loopback): the only ones plain http may reach."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str | None) -> bool:
    """``localhost``, or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address((host or "").strip("[]")).is_loopback
    except ValueError:
        return False
