"""The consent page in a real browser: Debian's chromium, driven by Selenium through Debian's
chromium-driver (``.ci/run`` installs both as root on Debian, so there, CI's case, their absence is a
failure; elsewhere this skips, saying so).
The page renders, a wrong key shows the error and no code, the right key sends the browser back
to the client with a code that exchanges for tokens. Screenshots are kept in the test's tmp_path."""

import os
import shutil
from pathlib import Path

import pytest

from colabhive_mcp.sandbox import DEMO_KEY

from .http_server import HttpServer
from .oauth_flow import Flow, Pages, pkce, query

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
CI_INSTALLS_THEM = os.geteuid() == 0 and Path("/etc/debian_version").exists() and bool(shutil.which("apt-get"))
pytestmark = [pytest.mark.real_clients, pytest.mark.skipif(
    not (CHROMIUM and DRIVER or CI_INSTALLS_THEM), reason=MISSING + "; .ci/run does as root on Debian")]


@pytest.fixture(scope="module")
def callback():
    """The client's redirect URI: a loopback page that says it got the answer."""
    pages = Pages()
    yield pages.put("/callback", b"<!doctype html><title>Connected</title><p>The application got its answer.</p>",
                    "text/html")
    pages.close()


@pytest.fixture
def browser(tmp_path):
    assert CHROMIUM and DRIVER, MISSING + ", though .ci/run installs them here (as root, on Debian): see what it said"
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra has it)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=900,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def test_the_consent_page_in_chromium(gateway_sandbox, callback, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    def after_submit(condition):  # the click returns before the next page has loaded on a busy machine
        return WebDriverWait(browser, 30).until(condition)

    server = HttpServer(gateway_sandbox.url, public=True)
    try:
        flow = Flow(server.root, server.url, redirect_uri=callback)
        flow.register(client_name="Browser Test App")
        verifier, challenge = pkce()
        browser.get(flow.authorize(challenge).url)
        assert browser.title == "Connect to ColabHive"
        assert "Connect Browser Test App to ColabHive" in browser.find_element(By.TAG_NAME, "h1").text
        browser.save_screenshot(str(tmp_path / "1-consent.png"))

        browser.find_element(By.ID, "key").send_keys("hive_this_key_is_wrong")
        browser.find_element(By.CSS_SELECTOR, "button[value=allow]").click()
        error = after_submit(shown.presence_of_element_located((By.CLASS_NAME, "error")))
        assert "ColabHive did not accept this key" in error.text
        assert browser.current_url.startswith(server.root + "/authorize")
        browser.save_screenshot(str(tmp_path / "2-wrong-key.png"))

        browser.find_element(By.ID, "key").send_keys(DEMO_KEY)
        browser.find_element(By.CSS_SELECTOR, "button[value=allow]").click()
        after_submit(shown.url_contains(callback + "?"))
        assert browser.current_url.startswith(callback + "?")
        answer = query(browser.current_url)
        assert answer["state"] == "st4te" and answer["iss"] == server.root
        browser.save_screenshot(str(tmp_path / "3-back-at-the-client.png"))
        exchanged = flow.exchange(answer["code"], verifier)
        assert exchanged.status_code == 200 and exchanged.json()["access_token"]
    finally:
        server.stop()
