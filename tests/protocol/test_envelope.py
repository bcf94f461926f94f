"""The eras' facts in one place: which MCP-Protocol-Version header a request without a 2026 envelope
may carry, and the refusal each other one gets."""

import pytest

from colabhive_mcp.protocol import envelope
from colabhive_mcp.revisions import LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS


@pytest.mark.parametrize("version", [None, *LEGACY_VERSIONS])
def test_a_handshake_revision_or_none_is_the_legacy_eras(version):
    assert envelope.legacy_header_refusal(version) is None


@pytest.mark.parametrize("version", MODERN_VERSIONS)
def test_a_2026_revision_without_its_envelope_is_a_header_mismatch(version):
    refused = envelope.legacy_header_refusal(version)
    assert refused.code == envelope.HEADER_MISMATCH == -32020 and envelope.META_VERSION in refused.message


def test_a_revision_not_served_is_refused_with_those_that_are():
    refused = envelope.legacy_header_refusal("2099-01-01")
    assert refused.code == envelope.UNSUPPORTED_PROTOCOL_VERSION == -32022
    assert refused.data == {"supported": list(SUPPORTED_VERSIONS), "requested": "2099-01-01"}
