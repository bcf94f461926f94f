"""server.json, the MCP registry's listing of the server: it names what is really published (the
package index's project and version, the settings' variable, the hosted address) in the registry's
shape (its schema's rules that this listing touches: the name's pattern, the description's length,
a pinned version), and says what the server card says."""

import configparser
import json
import re
from pathlib import Path

from colabhive_mcp import __version__
from colabhive_mcp.protocol.lifecycle import REGISTRY_NAME, SERVER, server_card
from colabhive_mcp.settings.sources import known_variables

ROOT = Path(__file__).resolve().parent.parent
LISTING = json.loads((ROOT / "server.json").read_text())


def test_the_listing_names_the_package_and_version_that_are_published():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    (package,) = LISTING["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == setup["metadata"]["name"]
    assert LISTING["version"] == package["version"] == __version__  # pinned: never a range, never "latest"
    assert package["transport"] == {"type": "stdio"} and package["runtimeHint"] == "uvx"
    (key,) = package["environmentVariables"]
    assert key["name"] in known_variables() and key["isSecret"] is True and key["isRequired"] is True


def test_the_listing_follows_the_registrys_rules_and_says_what_the_server_card_says():
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", LISTING["name"]) and LISTING["name"] == REGISTRY_NAME
    assert 1 <= len(LISTING["description"]) <= 100 and LISTING["$schema"].startswith(
        "https://static.modelcontextprotocol.io/schemas/")
    (remote,) = LISTING["remotes"]
    card = server_card(remote["url"], oauth=True)
    assert (card["name"], card["version"], card["title"]) == (LISTING["name"], LISTING["version"], LISTING["title"])
    assert remote["type"] == card["remotes"][0]["type"] and remote["url"] == card["remotes"][0]["url"]
    assert remote["url"] in (ROOT / "README.rst").read_text()  # the hosted address the README gives
    (header,) = remote["headers"]
    assert header["name"] == "Authorization" and header["value"] == "Bearer {api_key}"
    assert header["variables"]["api_key"]["isSecret"] is True and SERVER["title"] == LISTING["title"]


def test_the_package_description_names_the_registry_entry_as_the_registry_checks():
    readme = (ROOT / "README.rst").read_text()  # (setup.cfg's long_description: what the index shows)
    assert f".. mcp-name: {LISTING['name']}\n" in readme
