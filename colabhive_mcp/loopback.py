"""Which hosts and addresses are this machine's (loopback): the one rule every check here uses.

Where plain http may go (a gateway, an OAuth redirect), whom single-tenant mode serves, where a bind
needs no metrics token, and which peer may name the client it forwards.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})  # the Host names of this machine


def is_loopback(host: str | None) -> bool:
    """``localhost``, or a loopback address (``127.0.0.0/8``, ``::1``, ``::ffff:127.0.0.1``; an IPv6
    one bracketed or not)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address((host or "").strip("[]"))
    except ValueError:
        return False
    return ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address) and bool(ip.ipv4_mapped and ip.ipv4_mapped.is_loopback))
