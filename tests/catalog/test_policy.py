"""The policy's side-effect lists: ``*`` means every side effect, in the deny list as in the allow list."""

import pytest

from colabhive_mcp.catalog.policy import Policy
from colabhive_mcp.settings.sources import load

WRITES = {"name": "crm-create-contact", "sideEffects": ["writes"]}
NETWORK = {"name": "web-scrape", "sideEffects": ["external_network"]}
NONE = {"name": "echo", "sideEffects": []}
UNKNOWN = {"name": "mystery"}


@pytest.mark.parametrize("given", [{"deny_side_effects": "*"}, {"side_effects": ""}, {"read_only": "true"}],
                         ids=["deny *", "allow none", "read-only"])
def test_every_way_of_refusing_side_effects_hides_every_action_that_has_one(given):
    policy = Policy.from_config(load(given, {}).config)
    assert policy.refusal(WRITES) and policy.refusal(NETWORK) and policy.refusal(UNKNOWN)
    assert policy.refusal(NONE) is None


def test_deny_star_says_which_side_effects_it_denied():
    assert Policy(deny_side_effects=("*",)).refusal(NETWORK) == "its side effects (external_network) are denied"
    assert Policy(deny_side_effects=("writes",)).refusal(NETWORK) is None
