"""What an OAuth grant lets an application use of a key's tools: its scopes.

``mcp`` is everything (what hosts ask for today, and what a key sent as itself always has). A
narrower grant is ``mcp:read`` (tools without side effects) plus, each on its own, ``mcp:write``
(tools with side effects other than billing, and those that do not say what they do) and
``mcp:billing`` (billable tools). The consent page offers three of them; a host that needs more
asks for it (step-up: a 403 whose challenge names every scope the call needs). A leaf: it imports
nothing of the house.
"""

from __future__ import annotations

FULL, READ, WRITE, BILLING = "mcp", "mcp:read", "mcp:write", "mcp:billing"
SUPPORTED = (FULL, READ, WRITE, BILLING)
# what the consent page offers: (its value, the scopes, what the person reads)
CHOICES = (("all", FULL, "All tools"),
           ("no-billing", f"{READ} {WRITE}", "All tools but billable ones (no spending)"),
           ("read", READ, "Read-only tools (nothing is changed or spent)"))


def parse(text: str | None) -> frozenset[str] | None:
    """The scopes ``text`` names (space-separated), with ``mcp:read`` under any narrower one; ``None``
    when it names one this server does not know. No text is everything."""
    named = frozenset((text or FULL).split())
    if not named or not named <= set(SUPPORTED):
        return None
    return frozenset({FULL}) if FULL in named else named | {READ}


def asked(text: str | None, otherwise: frozenset[str] = frozenset({FULL})) -> frozenset[str]:
    """What a client's request asks for (``scope``), those this server knows: the others are ignored,
    as RFC 6749 §3.3 lets an authorization server do (hosts ask for ``openid`` or ``offline_access``
    too); none known is ``otherwise`` (everything, or what a refresh token holds)."""
    known = " ".join(scope for scope in (text or "").split() if scope in SUPPORTED)
    return parse(known) or otherwise if known else otherwise


def spelt(granted: frozenset[str]) -> str:
    """The scope parameter for ``granted``: its scopes in one order (``mcp`` for everything)."""
    return FULL if FULL in granted else " ".join(s for s in SUPPORTED if s in granted)


def needed(effects: list[str] | None, billable: bool) -> frozenset[str]:
    """The scopes a tool needs, from its declared side effects (``None``: unknown) and whether it is billable."""
    writes = effects is None or any(effect != "billing" for effect in effects)
    return frozenset({READ} | ({WRITE} if writes else set()) | ({BILLING} if billable else set()))


def allows(granted: frozenset[str], effects: list[str] | None, billable: bool) -> bool:
    return FULL in granted or needed(effects, billable) <= granted


def covers(granted: frozenset[str], asked: frozenset[str]) -> bool:
    """Whether ``granted`` holds all of ``asked`` (a refresh may narrow a scope, never widen it)."""
    return FULL in granted or (FULL not in asked and asked <= granted)
