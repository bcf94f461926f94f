"""OAuth in one process: sealing, the settings, the edge's answers with and without public_url, the
consent page's headers and rate limit, registration and client metadata documents' checks. The
same through real gunicorn, the SDKs and a browser: test_oauth_http.py, test_oauth_sdks.py,
test_oauth_browser.py."""

import functools
import json
import socket
import ssl
import subprocess
import threading
import time
from http.server import HTTPServer, SimpleHTTPRequestHandler

import pytest
from werkzeug.test import Client

from colabhive_mcp.oauth import OAuthError, documents
from colabhive_mcp.oauth.clients import Clients, matches
from colabhive_mcp.oauth.consent import FORM_TTL_S
from colabhive_mcp.oauth.sealing import Sealer
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B
from colabhive_mcp.settings.config import Config, ConfigError
from colabhive_mcp.settings.sources import load
from colabhive_mcp.transports.http.app import McpApp

from ..support.oauth_flow import Flow, Pages, SignedClient, error_code, form_token, pkce, query
from ..support.waiting import wait_until

SECRET = "s" * 64
PUBLIC = "http://127.0.0.1:8765/mcp"


class AppSession:
    """``requests``-like calls into the app in this process, for :class:`Flow`."""

    def __init__(self, app):
        self.client = Client(app)

    def request(self, method, url, allow_redirects=False, timeout=None, verify=None, params=None, **options):
        return Answered(self.client.open(url.removeprefix("http://127.0.0.1:8765"), method=method,
                                         query_string=params, **options))


class Answered:
    """A test response as ``requests`` shows one."""

    def __init__(self, response):
        self.status_code, self.headers, self.text = response.status_code, response.headers, response.get_data(True)

    def json(self):
        return json.loads(self.text)


@pytest.fixture
def app(sandbox):
    return McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC, oauth_consents_per_minute=3))


@pytest.fixture
def flow(app):
    return Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app))


def mcp(app, **headers):
    return Client(app).post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                            headers={"Accept": "application/json, text/event-stream", **headers})


# -- sealing -------------------------------------------------------------------------------------

def test_a_sealed_value_opens_only_unaltered_for_its_purpose_with_its_secret_until_it_expires():
    now = [1000.0]
    sealer = Sealer(SECRET, "access token", "t_", clock=lambda: now[0])
    value = sealer.seal({"k": "hive_x"}, ttl=60)
    assert sealer.open(value)["k"] == "hive_x" and "hive_x" not in value
    assert Sealer(SECRET, "refresh token", "t_").open(value) is None
    assert Sealer("t" * 64, "access token", "t_").open(value) is None
    for i in (3, len(value) // 2, len(value) - 1):
        assert sealer.open(value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1:]) is None
    assert sealer.open(value + "==") is None and sealer.open(None) is None
    now[0] += 60
    assert sealer.open(value) is None and sealer.read(value)["k"] == "hive_x"


# -- settings and the edge -------------------------------------------------------------------------

def test_public_url_turns_oauth_on_and_is_checked():
    assert load({"public_url": "https://mcp.example.com/mcp"}, {}).config.oauth_on
    assert not load({"public_url": "https://mcp.example.com/mcp", "oauth": "false"}, {}).config.oauth_on
    assert not load({}, {}).config.oauth_on
    for wrong in ("https://mcp.example.com/", "http://mcp.example.com/mcp", "ftp://x/mcp"):
        with pytest.raises(ConfigError):
            load({"public_url": wrong}, {})
    with pytest.raises(ConfigError, match="oauth needs public_url"):
        McpApp(Config(session_secret=SECRET, oauth=True))


def test_without_public_url_a_credential_less_request_gets_the_same_answer_as_before(sandbox):
    plain = McpApp(Config(api_url=sandbox.url, session_secret=SECRET))
    answer = mcp(plain)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
    assert Client(plain).get("/.well-known/oauth-protected-resource").status_code == 404
    assert Client(plain).get("/authorize").status_code == 404


def test_with_public_url_only_a_request_without_credentials_is_challenged(app):
    challenged = mcp(app)
    assert challenged.headers["WWW-Authenticate"] == ('Bearer resource_metadata="http://127.0.0.1:8765/.well-known/'
                                                      'oauth-protected-resource/mcp", scope="mcp"')
    assert mcp(app, Authorization=f"Bearer {DEMO_KEY}").status_code == 200
    assert mcp(app, **{"X-API-Key": DEMO_KEY}).status_code == 200
    malformed = mcp(app, Authorization="Basic abc")
    assert malformed.status_code == 401 and malformed.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_the_metadata_and_token_endpoints_answer_any_origin(app):
    client = Client(app)
    answer = client.get("/.well-known/oauth-authorization-server", headers={"Origin": "https://claude.ai"})
    assert answer.status_code == 200 and answer.headers["Access-Control-Allow-Origin"] == "*"
    preflight = client.options("/token", headers={"Origin": "https://claude.ai"})
    assert preflight.status_code == 204 and "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert client.post("/authorize", headers={"Origin": "https://evil.example"}).status_code == 403


# -- the consent page ------------------------------------------------------------------------------

def test_the_consent_page_forbids_framing_caching_and_foreign_resources(flow):
    flow.register(client_name="<b>Evil</b> App")
    page = flow.authorize(pkce()[1])
    assert page.status_code == 200 and "&lt;b&gt;Evil&lt;/b&gt; App" in page.text and "<b>Evil" not in page.text
    policy = page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert "form-action 'self' http://127.0.0.1:45678" in policy
    assert page.headers["Cache-Control"] == "no-store" and page.headers["X-Frame-Options"] == "DENY"
    assert "<script" not in page.text


def test_consent_forms_are_limited_per_address(flow):
    flow.register()
    page = flow.authorize(pkce()[1])
    answers = [flow.consent(page.text, "hive_guess_number_%d" % i).status_code for i in range(4)]
    assert answers == [401, 401, 401, 429]
    assert error_code(flow.consent(page.text, DEMO_KEY).text) == "temporarily_unavailable"


def test_an_altered_or_expired_form_token_gives_no_code(flow, app):
    flow.register()
    page = flow.authorize(pkce()[1])
    token = form_token(page.text)
    altered = flow.send("POST", "/authorize", data={"request": token[:-3] + "abc", "key": DEMO_KEY})
    assert altered.status_code == 400 and "Location" not in altered.headers and "expired" in altered.text
    assert error_code(altered.text) == "invalid_request"
    forms = app.oauth.consent.forms
    forms.clock = lambda: time.time() + FORM_TTL_S + 1  # the user comes back to the page after 15 minutes
    expired = flow.consent(page.text, DEMO_KEY)
    assert expired.status_code == 400 and "Location" not in expired.headers and "expired" in expired.text
    forms.clock = time.time
    assert flow.consent(page.text, DEMO_KEY).status_code == 303  # (the same form, in time)


def test_faults_after_the_client_is_known_go_back_to_it_with_state_and_iss(flow):
    flow.register()
    for overrides, error in (({"response_type": "token"}, "unsupported_response_type"),
                             ({"code_challenge_method": "plain"}, "invalid_request"),
                             ({"code_challenge": None}, "invalid_request")):
        answer = flow.authorize(pkce()[1], **overrides)
        back = query(answer.headers["Location"])
        assert answer.status_code == 303 and back["error"] == error and back["state"] == "st4te"
        assert back["iss"] == "http://127.0.0.1:8765"


def test_a_code_is_for_its_own_client_only(flow, app):
    flow.register()
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    other = Flow(flow.root, PUBLIC, session=AppSession(app))
    other.register()
    stolen = other.exchange(code, verifier)
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    assert flow.exchange(code, verifier).status_code == 200  # (the refusal did not spend it)


# -- single use ----------------------------------------------------------------------------------

def test_a_used_code_and_refresh_token_stay_used_however_many_refreshes_others_make(sandbox):
    """The review's attack: a store at its smallest size, another key's client refreshing 1,200 times;
    the victim's redeemed code and spent refresh token must not work again."""
    app = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC, store_max_entries=1000,
                        oauth_token_requests_per_minute=0, oauth_refreshes_per_minute=0))
    victim, churner = (Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app)) for _ in range(2))
    victim.register()
    verifier, challenge = pkce()
    code = victim.code(DEMO_KEY, challenge)
    used_refresh = victim.exchange(code, verifier).json()["refresh_token"]
    assert victim.refresh(used_refresh).status_code == 200
    refresh_token = churner.tokens(DEMO_KEY_B)["refresh_token"]
    for _ in range(1200):
        answer = churner.refresh(refresh_token)
        assert answer.status_code == 200, answer.text
        refresh_token = answer.json()["refresh_token"]
    replayed_code, replayed_refresh = victim.exchange(code, verifier), victim.refresh(used_refresh)
    assert (replayed_code.status_code, replayed_refresh.status_code) == (400, 400)
    assert "already used" in replayed_code.json()["error_description"]
    assert "already used" in replayed_refresh.json()["error_description"]


def test_a_store_full_of_grants_refuses_new_ones_and_keeps_the_ones_it_holds(flow, app):
    flow.register()
    verifier, challenge = pkce()
    held = flow.exchange(flow.code(DEMO_KEY, challenge), verifier).json()["refresh_token"]
    store = app.tenancy.instance.store
    store.max_entries = len(store._marks)  # every mark it may hold is live
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    full = flow.exchange(code, verifier)
    assert full.status_code == 503 and full.json()["error"] == "temporarily_unavailable"
    assert "try again later" in full.json()["error_description"] and full.headers["Retry-After"] == "60"
    assert flow.refresh(held).status_code == 200  # a grant held goes on
    store.max_entries += 1
    assert flow.exchange(code, verifier).status_code == 200  # (the refusal did not spend the code)


def test_the_token_endpoint_is_limited_per_address(sandbox):
    app = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC,
                        oauth_token_requests_per_minute=3))
    flow = Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app))
    answers = [flow.refresh("hmcp_rt_guess%d" % i) for i in range(4)]
    assert [a.status_code for a in answers] == [400, 400, 400, 429]
    assert answers[-1].json()["error"] == "temporarily_unavailable" and 0 < int(answers[-1].headers["Retry-After"]) <= 60


def test_the_token_endpoint_names_what_it_refuses(flow):
    assert flow.send("POST", "/token", data={"grant_type": "password"}).json()["error"] == "unsupported_grant_type"
    assert flow.send("POST", "/token", json={"grant_type": "refresh_token"}).json()["error"] == "invalid_request"
    unknown = flow.send("POST", "/authorize", data={})
    assert unknown.status_code == 400


# -- clients --------------------------------------------------------------------------------------

def test_registration_takes_public_clients_with_safe_redirects():
    clients = Clients(SECRET, ("https", "http"))
    registered = clients.register({"redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
                                   "client_name": "Claude", "token_endpoint_auth_method": "client_secret_post"})
    assert registered["token_endpoint_auth_method"] == "none" and "client_secret" not in registered
    found = clients.find(registered["client_id"])
    assert found.name == "Claude" and found.redirect_uris == ("https://claude.ai/api/mcp/auth_callback",)
    for metadata, error in (({"redirect_uris": ["http://example.com/cb"]}, "invalid_redirect_uri"),
                            ({"redirect_uris": ["cursor://anysphere/cb"]}, "invalid_redirect_uri"),
                            ({"redirect_uris": ["https://a.example/cb#x"]}, "invalid_redirect_uri"),
                            ({"redirect_uris": []}, "invalid_redirect_uri"),
                            ({"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]},
                             "invalid_client_metadata"),
                            ({"redirect_uris": ["https://a.example/cb"], "grant_types": "implicit"},
                             "invalid_client_metadata")):
        with pytest.raises(OAuthError) as refused:
            clients.register(metadata)
        assert refused.value.error == error
    assert Clients(SECRET, ("https", "http", "cursor")).register({"redirect_uris": ["cursor://anysphere/cb"]})
    with pytest.raises(OAuthError, match="not issued here"):
        Clients("t" * 64, ("https",)).find(registered["client_id"])


def test_redirects_match_exactly_except_a_loopback_port():
    assert matches("http://127.0.0.1/cb", "http://127.0.0.1:61000/cb")
    assert matches("http://localhost:3000/cb", "http://localhost:4000/cb")
    assert not matches("http://127.0.0.1/cb", "http://127.0.0.1:61000/cb/x")
    assert not matches("https://app.example/cb", "https://app.example:8443/cb")
    assert not matches("https://app.example/cb", "https://app.example/cb?next=evil")


@pytest.fixture
def document_server():
    pages = Pages()
    yield pages.put
    pages.close()


def test_client_metadata_documents_are_checked(document_server):
    clients = Clients(SECRET, ("https", "http"), loopback_documents=True)
    url = document_server("/ok.json", b"")
    document_server("/ok.json", json.dumps({"client_id": url, "client_name": "Doc",
                                            "redirect_uris": ["http://127.0.0.1/cb"]}).encode())
    assert clients.find(url).name == "Doc"
    for path, body, why in (("/big.json", b" " * (documents.MAX_BYTES + 1), "larger than"),
                            ("/list.json", b"[]", "not a JSON object"),
                            ("/text.json", b"hello", "not JSON"),
                            ("/other.json", json.dumps({"client_id": "https://x.example/c.json",
                                                        "redirect_uris": ["https://x.example/cb"]}).encode(),
                             "names another client_id")):
        with pytest.raises(OAuthError, match=why) as refused:
            clients.find(document_server(path, body))
        assert refused.value.error == "invalid_client"
    with pytest.raises(OAuthError, match="not one that every URL parser reads alike"):  # (a ValueError once)
        clients.find("https://client.example:99999/client.json")
    with pytest.raises(OAuthError, match="private or reserved"):  # loopback, without the test setting
        Clients(SECRET, ("https",)).find(url.replace("http://", "https://").replace("/ok.json", "/fresh.json"))


def drip(head):
    """A loopback server that answers one request a byte every 0.2 s for a minute: after ``head``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        connection, _ = listener.accept()
        with connection, listener:
            connection.recv(4096)
            try:
                connection.sendall(head)
                for _ in range(300):
                    connection.sendall(b" ")
                    time.sleep(0.2)
            except OSError:  # the fetch hung up
                pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/client.json"


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nX-Slow:"], ids=["body", "headers"])
def test_a_metadata_document_dripping_in_is_cut_at_the_time_limit(head, monkeypatch):
    monkeypatch.setattr(documents, "TIMEOUT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(OAuthError, match="too slow to arrive") as refused:
        Clients(SECRET, ("https", "http"), loopback_documents=True).find(drip(head))
    assert refused.value.error == "invalid_client"
    assert time.monotonic() - started < 30  # the drip lasts 60 s; the limit is 1 s


def test_a_metadata_document_whose_socket_times_out_before_the_cut_is_too_slow_too(monkeypatch):
    """The connection's timeout and the timer's cut are one limit; on a busy machine the socket's may
    come first (here it is made to), and the refusal says the same."""
    monkeypatch.setattr(documents, "_connection", lambda parts, address, port:
                        documents.urllib3.connection.HTTPConnection(address, port, timeout=0.3))
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connected in its backlog, never answered
        started = time.monotonic()
        with pytest.raises(OAuthError, match="too slow to arrive"):
            Clients(SECRET, ("https", "http"), loopback_documents=True).find(
                f"http://127.0.0.1:{silent.getsockname()[1]}/client.json")
    assert time.monotonic() - started < documents.TIMEOUT_S  # the socket's timeout came first


def test_a_metadata_document_whose_host_name_resolves_slowly_is_refused_within_the_limit(monkeypatch):
    """Whoever owns a host name runs its name server, and may make a lookup take half a minute: the
    request is refused within the limit all the same, and the lookup still going keeps its place
    among the fetches made at once until it ends (slow lookups hold at most that many threads)."""
    monkeypatch.setattr(documents, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(documents, "_fetching", threading.BoundedSemaphore(1))
    answered = threading.Event()

    def slow_lookup(host, port, loopback):
        answered.wait(30)
        return "127.0.0.1"

    monkeypatch.setattr(documents, "_public_address", slow_lookup)
    clients = Clients(SECRET, ("https",))
    started = time.monotonic()
    with pytest.raises(OAuthError, match="too slow to arrive") as refused:
        clients.find("https://slow-name.example/client.json")
    assert refused.value.error == "invalid_client" and time.monotonic() - started < 5
    with pytest.raises(OAuthError) as busy:
        clients.find("https://another.example/client.json")
    assert busy.value.error == "temporarily_unavailable"  # the first lookup still holds the one place
    answered.set()
    assert wait_until(lambda: documents._fetching.acquire(blocking=False), timeout=10)  # given back once it ended
    documents._fetching.release()


def test_a_metadata_document_is_kept_as_its_cache_control_says_and_a_refusal_briefly(document_server, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(documents, "_cache", documents.new_cache(timer=lambda: now[0]))
    clients = Clients(SECRET, ("https", "http"), loopback_documents=True)
    url = document_server("/kept.json", b"not yet")
    with pytest.raises(OAuthError, match="not JSON"):
        clients.find(url)

    def publish(name, cache_control=None):
        document_server("/kept.json", {"client_id": url, "client_name": name, "redirect_uris": ["http://127.0.0.1/cb"]})
        document_server.__self__.headers["/kept.json"] = {"Cache-Control": cache_control} if cache_control else {}

    publish("First")
    with pytest.raises(OAuthError, match="not JSON"):
        clients.find(url)  # the refusal is remembered: no request goes out for it
    now[0] += documents.FAILED_S
    assert clients.find(url).name == "First"
    publish("Second")
    now[0] += documents.CACHE_S - 1
    assert clients.find(url).name == "First"  # (no Cache-Control: kept the longest)
    now[0] += 2
    assert clients.find(url).name == "Second"
    for cache_control, kept in (("max-age=60", 60), ("public, max-age=100000", documents.CACHE_S),
                                ("no-store", documents.MIN_CACHE_S), ("max-age=0", documents.MIN_CACHE_S)):
        publish("Fresh", cache_control)
        now[0] += documents.CACHE_S  # (whatever was kept is gone)
        assert clients.find(url).name == "Fresh"
        publish("Newer")
        now[0] += kept - 1
        assert clients.find(url).name == "Fresh", cache_control
        now[0] += 1
        assert clients.find(url).name == "Newer", cache_control


def test_a_document_served_as_anything_but_json_is_refused(document_server):
    clients = Clients(SECRET, ("https", "http"), loopback_documents=True)
    url = document_server.__self__.url("/typed.json")
    document_server("/typed.json", json.dumps({"client_id": url, "redirect_uris": ["http://127.0.0.1/cb"]}).encode(),
                    "text/html")
    with pytest.raises(OAuthError, match="not served as JSON"):
        clients.find(url)


@pytest.mark.parametrize("address", ["::10.0.0.1", "::127.0.0.1", "::ffff:0:10.0.0.1", "64:ff9b::a00:1",
                                     "64:ff9b:1::a00:1", "2002:a00:1::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                                     "fec0::1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "fd00::1", "fe80::1",
                                     "::1", "::", "10.1.2.3", "100.64.0.1", "169.254.169.254"])
def test_no_address_that_can_reach_a_private_or_loopback_one_is_public(address):
    import ipaddress

    assert not documents.public(ipaddress.ip_address(address))


def test_public_addresses_stay_public():
    import ipaddress

    for address in ("8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2a00:1450:4001:80b::200e"):
        assert documents.public(ipaddress.ip_address(address)), address
    assert documents.public(ipaddress.ip_address("::1"), loopback=True)


def test_document_fetches_are_limited_per_client_address(sandbox, document_server):
    app = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC, oauth_loopback_clients=True,
                        oauth_document_fetches_per_minute=2))
    flow = Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app))
    statuses = []
    for i in range(4):
        flow.client_id = document_server.__self__.url(f"/never-{i}.json")  # each a new document, each missing
        statuses.append(flow.authorize(pkce()[1]).status_code)
    assert statuses == [400, 400, 429, 429]
    flow.client_id = document_server.__self__.url("/never-0.json")
    assert flow.authorize(pkce()[1]).status_code == 400  # a failure remembered costs no fetch


def test_a_code_issued_by_another_deployment_with_the_same_secret_is_refused(sandbox, flow):
    other = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url="http://127.0.0.1:8765/other/mcp"))
    flow.register()
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    there = Flow("http://127.0.0.1:8765", "http://127.0.0.1:8765/other/mcp", session=AppSession(other))
    there.client_id = flow.client_id
    stolen = there.exchange(code, verifier, resource=None)
    assert stolen.status_code == 400 and "another resource" in stolen.json()["error_description"]


def test_a_client_name_reaches_the_page_and_the_log_without_control_characters(flow, app):
    registered = flow.register(client_name="Evil\n{\"event\": \"forged\"}\u202egnp.exe\x1b[31m")
    assert registered["client_name"] == 'Evil {"event": "forged"} gnp.exe [31m'
    assert app.oauth.clients.find(app.oauth.clients.sealer.seal({"n": "a\nb", "u": ["https://a.example/cb"]})).name \
        == "a b"  # (a registration sealed before names were cleaned)


@pytest.fixture
def tls_documents(tmp_path):
    """A loopback https server of one metadata document, its certificate for ``localhost`` (and
    trusted); yields its port."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(tmp_path / "key.pem"), "-out",
                    str(tmp_path / "cert.pem")], check=True, capture_output=True, timeout=60)
    (tmp_path / "client.json").write_text(json.dumps({"client_id": "set below", "redirect_uris": ["https://a.example/cb"]}))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = HTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, server.server_address[1]
    server.shutdown()


def test_a_metadata_document_comes_over_tls_verified_for_its_host_name(tls_documents, monkeypatch):
    directory, port = tls_documents
    url = f"https://localhost:{port}/client.json"
    (directory / "client.json").write_text(json.dumps({"client_id": url, "redirect_uris": ["https://a.example/cb"]}))
    clients = Clients(SECRET, ("https",), loopback_documents=True)
    with pytest.raises(OAuthError, match="could not be fetched") as untrusted:
        clients.find(url)
    assert untrusted.value.error == "invalid_client"
    monkeypatch.setenv("SSL_CERT_FILE", str(directory / "cert.pem"))
    monkeypatch.setattr(documents, "_cache", documents.new_cache())  # (a failure is remembered a while)
    assert clients.find(url).redirect_uris == ("https://a.example/cb",)
    with pytest.raises(OAuthError, match="could not be fetched") as other_name:  # the certificate is localhost's
        clients.find(f"https://127.0.0.1:{port}/client.json")
    assert other_name.value.error == "invalid_client"


# -- signed clients (ChatGPT's private_key_jwt) ------------------------------------------------------

@pytest.fixture
def signed(sandbox, document_server):
    """An app that fetches documents from loopback, and a ChatGPT-shaped client of it, through its flow."""
    app = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC, oauth_loopback_clients=True,
                        oauth_consents_per_minute=0))
    pages = document_server.__self__
    client = SignedClient(pages, "http://127.0.0.1:8765/token")
    flow = Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app))
    flow.client_id = client.client_id
    return flow, client


def test_the_metadata_offer_signed_clients():
    from colabhive_mcp.oauth.metadata import Endpoints

    metadata = Endpoints.of(PUBLIC).authorization_server()
    assert metadata["token_endpoint_auth_methods_supported"] == ["none", "private_key_jwt"]
    assert {"RS256", "ES256"} <= set(metadata["token_endpoint_auth_signing_alg_values_supported"])
    assert not {"none", "HS256"} & set(metadata["token_endpoint_auth_signing_alg_values_supported"])


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_a_signed_client_connects_and_refreshes_with_its_assertions(sandbox, document_server, alg):
    app = McpApp(Config(api_url=sandbox.url, session_secret=SECRET, public_url=PUBLIC, oauth_loopback_clients=True))
    client = SignedClient(document_server.__self__, "http://127.0.0.1:8765/token", alg=alg,
                          path=f"/oauth/{alg}/client.json")
    flow = Flow("http://127.0.0.1:8765", PUBLIC, session=AppSession(app))
    flow.client_id = client.client_id
    verifier, challenge = pkce()
    page = flow.authorize(challenge)
    assert page.status_code == 200 and "ChatGPT" in page.text, page.text
    code = query(flow.consent(page.text, DEMO_KEY).headers["Location"])["code"]
    tokens = flow.exchange(code, verifier, **client.proof())
    assert tokens.status_code == 200, tokens.text
    refreshed = flow.refresh(tokens.json()["refresh_token"], client_id=None,  # (RFC 7523 §3: it may go)
                             **client.proof(aud="http://127.0.0.1:8765"))  # the issuer is an audience too
    assert refreshed.status_code == 200, refreshed.text
    assert mcp(app, Authorization=f"Bearer {refreshed.json()['access_token']}").status_code == 200


def test_a_signed_client_without_a_valid_assertion_gets_no_token(signed):
    flow, client = signed
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    other_key = SignedClient(client.pages, "x", path="/other/client.json").keys[0][1]
    replayed = client.proof()
    for proof, why in (({}, "required"),
                       ({**client.proof(), "client_assertion": client.assertion(key=other_key)}, "does not hold"),
                       (client.proof(aud="https://elsewhere.example/token"), "not for this server"),
                       (client.proof(exp=int(time.time()) - 120), "expired"),
                       (client.proof(exp=int(time.time()) + 3600), "too long"),
                       (client.proof(sub="https://elsewhere.example/client.json"), "subject"),
                       (client.proof(iss="https://elsewhere.example/client.json"), "client_id of the request"),
                       (client.proof(jti=""), "jti"),
                       ({**client.proof(), "client_assertion_type": "urn:other"}, "client_assertion_type"),
                       ({**client.proof(), "client_assertion": "not.a.jwt"}, "not a JWT")):
        answer = flow.exchange(code, verifier, **proof)
        assert answer.status_code == 401 and answer.json()["error"] == "invalid_client", (why, answer.text)
        assert why in answer.json()["error_description"] and "access_token" not in answer.text, why
    first = flow.exchange(code, verifier, **replayed)
    assert first.status_code == 200, first.text  # (none of the refusals spent the code)
    refresh_token = first.json()["refresh_token"]
    again = flow.refresh(refresh_token, **replayed)
    assert again.status_code == 401 and "used before" in again.json()["error_description"]
    assert flow.refresh(refresh_token).json()["error"] == "invalid_client"  # a refresh needs one too
    assert flow.refresh(refresh_token, **client.proof()).status_code == 200


def test_a_signed_clients_new_key_is_fetched_once_when_an_assertion_names_it(signed):
    flow, client = signed
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    assert flow.exchange(code, verifier, **client.proof()).status_code == 200  # its key set is now kept
    client.rotate()  # a new key, published: assertions now name it
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    assert flow.exchange(code, verifier, **client.proof()).status_code == 200
    stranger = {**client.proof(), "client_assertion": client.assertion(kid="never-published")}
    answer = flow.exchange(code, verifier, **stranger)
    assert answer.status_code == 401 and "does not publish" in answer.json()["error_description"]


def test_a_public_client_may_not_send_an_assertion_and_a_registered_one_cannot_sign(signed, flow):
    _, client = signed
    flow.register()
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    answer = flow.exchange(code, verifier, client_assertion_type="urn:ietf:params:oauth:client-assertion-type:"
                           "jwt-bearer", client_assertion=client.assertion(iss=flow.client_id, sub=flow.client_id))
    assert answer.status_code == 401 and answer.json()["error"] == "invalid_client"
    assert flow.exchange(code, verifier).status_code == 200


def test_documents_asking_for_what_is_not_offered_are_refused_in_plain_words(document_server):
    clients = Clients(SECRET, ("https", "http"), loopback_documents=True)
    base = {"redirect_uris": ["https://chatgpt.com/connector/oauth/x"]}
    for extra, words in (({"token_endpoint_auth_method": "client_secret_basic"}, "does not offer"),
                         ({"token_endpoint_auth_method": "private_key_jwt"}, "gives no keys"),
                         ({"token_endpoint_auth_method": "private_key_jwt", "token_endpoint_auth_signing_alg": "HS256",
                           "jwks_uri": "https://chatgpt.com/oauth/jwks.json"}, "does not accept"),
                         ({"token_endpoint_auth_method": "private_key_jwt",
                           "jwks_uri": "http://example.com/jwks.json"}, "https")):
        path = f"/{words.replace(' ', '-')}.json"
        document_server(path, {"client_id": document_server(path, {}), **base, **extra})
        url = document_server.__self__.url(path)
        with pytest.raises(OAuthError, match=words) as refused:
            clients.find(url)
        assert refused.value.error == "invalid_client"
        assert "token_endpoint_auth_method" not in refused.value.description


def test_claudes_registration_is_accepted_as_sent_and_answered_with_what_is_honoured():
    registered = Clients(SECRET, ("https", "http")).register({
        "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"], "client_name": "Claude",
        "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer"],
        "response_types": ["code"], "token_endpoint_auth_method": "client_secret_basic"})
    assert registered["grant_types"] == ["authorization_code", "refresh_token"]
    assert registered["token_endpoint_auth_method"] == "none" and "client_secret" not in registered


# -- the pages a person sees -------------------------------------------------------------------------

def test_the_consent_form_is_taken_from_its_own_origin_only(flow):
    flow.register()
    page = flow.authorize(pkce()[1])
    for origin in ("http://127.0.0.1:9999", "https://127.0.0.1:8765", "null"):
        answer = flow.send("POST", "/authorize", data={"request": form_token(page.text), "key": DEMO_KEY,
                                                       "action": "allow"}, headers={"Origin": origin})
        assert answer.status_code == 403 and "Location" not in answer.headers, origin
    same = flow.send("POST", "/authorize", data={"request": form_token(page.text), "key": DEMO_KEY, "action": "allow"},
                     headers={"Origin": "http://127.0.0.1:8765"})
    assert same.status_code == 303


@pytest.mark.parametrize("uri", ["https://evil.example\\@claude.ai/cb", "https://claude.ai\\.evil.example/cb",
                                 "https://user@claude.ai/cb", "https://claude.ai:99999/cb", "https://clau de.ai/cb",
                                 "https://claude.ai%2eevil.example/cb", "https://clÄude.ai/cb",
                                 "https://claude.ai/cb\t", "http://127.0.0.1\\@evil.example/cb"])
def test_redirect_uris_that_parsers_read_differently_are_refused(uri, flow):
    with pytest.raises(OAuthError) as refused:
        Clients(SECRET, ("https", "http")).register({"redirect_uris": [uri]})
    assert refused.value.error == "invalid_redirect_uri"


def test_a_registration_from_before_the_strict_check_gets_an_error_page_not_a_redirect(flow, app):
    sneaky = "https://evil.example\\@claude.ai/cb"
    flow.client_id = app.oauth.clients.sealer.seal({"n": "Claude", "u": [sneaky]})  # (as an older server sealed it)
    flow.redirect_uri = sneaky
    answer = flow.authorize(pkce()[1])
    assert answer.status_code == 400 and "Location" not in answer.headers and "backslash" in answer.text


def test_the_consent_page_says_who_vouches_where_the_answer_goes_and_how_long_access_lasts(flow, signed):
    flow.register(client_name="Claude")
    registered = flow.authorize(pkce()[1]).text
    assert "“Claude”" in registered and "a name the application gave itself" in registered
    assert "an application on your own computer" in registered and "port 45678" in registered
    assert "for 1 hour at a time" in registered and "after 30 days without use" in registered
    assert "revoke the key" in registered and "verified by its address" not in registered
    chatgpt, _ = signed
    by_document = chatgpt.authorize(pkce()[1]).text
    assert "127.0.0.1, verified by its address" in by_document and "gave itself" not in by_document


def test_error_pages_speak_plainly_with_the_code_small_beneath(flow):
    flow.client_id = "hmcp_client_" + "A" * 60
    page = flow.authorize(pkce()[1]).text
    message = page.split('<p class="error">')[1].split("</p>")[0]
    assert message.startswith("This server does not know this application") and "client_id" not in message
    assert error_code(page) == "invalid_client" and "<small>" in page


def test_a_store_that_fails_says_so_and_lets_no_use_through(tmp_path, monkeypatch):
    import sqlite3

    from colabhive_mcp.oauth.grants import Grant, Grants
    from colabhive_mcp.store.sqlite import SqliteStore

    store = SqliteStore(str(tmp_path / "instance.db"))
    grants = Grants(SECRET, PUBLIC, store, 3600, 86400)
    verifier, challenge = pkce()
    form = {"code": grants.code(Grant(DEMO_KEY, "client", PUBLIC), "https://a.example/cb", challenge),
            "client_id": "client", "redirect_uri": "https://a.example/cb", "code_verifier": verifier}

    def fail(_store):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SqliteStore, "_connect", fail)
    with pytest.raises(OAuthError) as failed:
        grants.redeem(form, None)
    assert failed.value.error == "temporarily_unavailable" and failed.value.status == 503
    assert "store failed" in failed.value.description and "already used" not in failed.value.description
    monkeypatch.undo()
    assert grants.redeem(form, None)["access_token"]  # (the failure spent nothing)


# -- the second review's findings ----------------------------------------------------------------

def test_a_sealed_value_opens_in_one_spelling_only():
    from colabhive_mcp.encoding import b64url, from_b64url

    sealer = Sealer(SECRET, "code", "hmcp_code_")
    tried = 0
    for size in range(40):  # payloads of every length: each spare-bit and alphabet case comes up
        value = sealer.seal({"k": "v" * size})
        body = value[len("hmcp_code_"):]
        raw = from_b64url(body)
        assert sealer.open(value) == {"k": "v" * size} and b64url(raw) == body
        others = {body.replace("-", "+").replace("_", "/"), body[:-1] + chr(ord(body[-1]) ^ 1)}
        for other in {text for text in others if text != body and _opens_as(text, raw)}:
            assert sealer.open("hmcp_code_" + other) is None, other
            tried += 1
    assert tried > 10


def _opens_as(text, raw):
    from colabhive_mcp.encoding import from_b64url

    try:
        return from_b64url(text) == raw
    except ValueError:
        return False


def test_a_code_respelled_is_not_a_new_grant(flow):
    flow.register()
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    assert flow.exchange(code, verifier).status_code == 200
    body = code[len("hmcp_code_"):]
    for other in {body.replace("-", "+").replace("_", "/"), body[:-1] + chr(ord(body[-1]) ^ 1)} - {body}:
        again = flow.exchange("hmcp_code_" + other, verifier)
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant", again.text


def test_a_used_refresh_token_stays_used_when_it_expires_during_its_check(tmp_path):
    from colabhive_mcp.oauth.grants import Grant, Grants
    from colabhive_mcp.store.memory import MemoryStore

    grants = Grants(SECRET, PUBLIC, MemoryStore(), 3600, 600)
    tokens = grants.tokens(Grant(DEMO_KEY, "client", PUBLIC), "grant", 1)
    form = {"refresh_token": tokens["refresh_token"], "client_id": "client"}
    grants.rotate(grants.refresh_grant(form, None), None)  # used once
    checked = grants.refresh_grant(form, None)  # the replay passes the stateless check in time...
    grants.refresh.clock = lambda: time.time() + 601  # ...and expires while the gateway is asked
    with pytest.raises(OAuthError, match="already used"):
        grants.rotate(checked, None)


def test_a_refresh_token_of_before_grants_had_names_works_once_and_its_old_mark_counts(tmp_path):
    import hashlib

    from colabhive_mcp.oauth.grants import OLD_USED, Grant, Grants, digest
    from colabhive_mcp.store.memory import MemoryStore

    store = MemoryStore()
    grants = Grants(SECRET, PUBLIC, store, 3600, 600)
    old = {"k": DEMO_KEY, "c": digest("client"), "r": digest(PUBLIC), "i": "0123456789abcdef"}
    fresh, spent = grants.refresh.seal(old, 600), grants.refresh.seal({**old, "i": "fedcba9876543210"}, 600)
    store.add(OLD_USED, hashlib.sha256(spent.encode()).hexdigest(), True, 600)  # as the old release marked it
    for token, works in ((fresh, True), (fresh, False), (spent, False)):
        form = {"refresh_token": token, "client_id": "client"}
        if works:
            assert grants.rotate(grants.refresh_grant(form, None), None)["refresh_token"]
        else:
            with pytest.raises(OAuthError, match="already used"):
                grants.rotate(grants.refresh_grant(form, None), None)
    assert Grant  # (the grant of each is the token's own)


def test_an_assertion_is_spent_only_with_a_request_that_passes_every_other_check(signed):
    flow, client = signed
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    proof = client.proof()
    garbage = flow.refresh("hmcp_rt_" + "A" * 80, **proof)
    assert garbage.status_code == 400 and garbage.json()["error"] == "invalid_grant"
    assert flow.exchange(code, verifier, **proof).status_code == 200  # the same assertion: not spent before


def test_an_assertion_whose_exp_is_not_a_number_is_refused_not_a_500(signed):
    flow, client = signed
    verifier, challenge = pkce()
    code = flow.code(DEMO_KEY, challenge)
    answer = flow.exchange(code, verifier, **client.proof(exp=str(int(time.time()) + 60)))
    assert answer.status_code == 401 and answer.json()["error"] == "invalid_client"
    no_iat = client.proof()
    no_iat["client_assertion"] = client.assertion(iat=None)
    assert flow.exchange(code, verifier, **no_iat).status_code == 200  # iat is optional (RFC 7523 §3)


@pytest.mark.parametrize("bad", ["https://[abc/cb", "https://a.example:99999/cb", "https://a.example/\u00e9"])
def test_urls_no_parser_reads_are_refused_never_a_500(flow, bad):
    assert flow.send("POST", "/register", json={"redirect_uris": [bad]}).status_code == 400
    flow.client_id = bad
    page = flow.authorize(pkce()[1])
    assert page.status_code == 400 and error_code(page.text) == "invalid_client"
    flow.register()
    assert flow.authorize(pkce()[1], resource=bad).status_code == 303  # (invalid_target, at the client)
    assert flow.send("POST", "/token", data={"grant_type": "refresh_token", "refresh_token": "x",
                                             "resource": bad}).status_code == 400
    page = flow.authorize(pkce()[1])
    posted = flow.send("POST", "/authorize", data={"request": form_token(page.text), "key": DEMO_KEY},
                       headers={"Origin": bad.rsplit("/", 1)[0]})
    assert posted.status_code == 403
