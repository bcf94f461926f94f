"""An OAuth client made of plain HTTP requests, for driving the server's authorization server step
by step (the SDK tests use the official clients instead): register, open the consent page, submit
it, exchange the code."""

import base64
import hashlib
import json
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import requests

REDIRECT = "http://127.0.0.1:45678/callback"


def pkce():
    """A PKCE verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def form_token(page_html):
    """The sealed request token of a consent page."""
    return re.search(r'name="request" value="([^"]+)"', page_html).group(1)


def error_code(page_html):
    """The RFC's error code an error page shows."""
    return re.search(r"Error code: <code>([a-z_]+)</code>", page_html).group(1)


def query(location):
    """The query parameters of a redirect's Location, one value each."""
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


class Flow:
    """One client of the server at ``root`` (its /mcp is ``resource``), with a ``session`` to send through."""

    def __init__(self, root, resource, session=None, redirect_uri=REDIRECT, verify=True):
        """``verify``: the TLS certificate(s) to trust, given with each request (the environment's
        bundle would win over a session's)."""
        self.root, self.resource, self.redirect_uri, self.verify = root, resource, redirect_uri, verify
        self.http = session or requests.Session()
        self.client_id = None

    def send(self, method, path, **options):
        """A request to the server, redirects not followed."""
        return self.http.request(method, self.root + path, allow_redirects=False, timeout=60, verify=self.verify,
                                 **options)

    def register(self, **metadata):
        answer = self.send("POST", "/register", json={"redirect_uris": [self.redirect_uri],
                                                      "client_name": "pytest client", **metadata})
        assert answer.status_code == 201, answer.text
        self.client_id = answer.json()["client_id"]
        return answer.json()

    def authorize(self, challenge, **overrides):
        """GET /authorize; the answer (a page, or a redirect, not followed)."""
        params = {"response_type": "code", "client_id": self.client_id, "redirect_uri": self.redirect_uri,
                  "code_challenge": challenge, "code_challenge_method": "S256", "state": "st4te",
                  "resource": self.resource, "scope": "mcp", **overrides}
        return self.send("GET", "/authorize", params={k: v for k, v in params.items() if v is not None})

    def consent(self, page_html, key, action="allow", grant=None):
        """Submit the consent page with ``key`` (and what the person chose it grants, when ``grant``
        is one of its choices: all, no-billing, read); the answer (not followed)."""
        chosen = {"grant": grant} if grant else {}
        return self.send("POST", "/authorize", data={"request": form_token(page_html), "key": key, "action": action,
                                                     **chosen})

    def code(self, key, challenge, grant=None, **asked):
        """A fresh authorization code for ``key`` (``grant``: what the person chooses; ``asked``: the
        authorization request's own parameters, its scope say)."""
        page = self.authorize(challenge, **asked)
        assert page.status_code == 200, page.text
        answer = self.consent(page.text, key, grant=grant)
        assert answer.status_code == 303, answer.text
        return query(answer.headers["Location"])["code"]

    def exchange(self, code, verifier, **overrides):
        data = {"grant_type": "authorization_code", "code": code, "redirect_uri": self.redirect_uri,
                "client_id": self.client_id, "code_verifier": verifier, "resource": self.resource, **overrides}
        return self.send("POST", "/token", data={k: v for k, v in data.items() if v is not None})

    def refresh(self, refresh_token, **overrides):
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self.client_id,
                "resource": self.resource, **overrides}
        return self.send("POST", "/token", data={k: v for k, v in data.items() if v is not None})

    def tokens(self, key, grant=None, **asked):
        """Register, consent with ``key`` (granting ``grant``) and exchange: the token response."""
        self.register()
        verifier, challenge = pkce()
        answer = self.exchange(self.code(key, challenge, grant, **asked), verifier)
        assert answer.status_code == 200, answer.text
        return answer.json()


class Pages:
    """A loopback web server of fixed answers (client metadata documents, a client's redirect page):
    ``put(path, body, content_type)`` returns the page's URL; other paths are 404. ``close()`` stops it."""

    def __init__(self):
        served = self.served = {}
        headers = self.headers = {}  # path -> extra headers of its answer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body, content_type = served.get(self.path.split("?")[0], (b"", "text/plain"))
                self.send_response(200 if self.path.split("?")[0] in served else 404)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.get(self.path.split("?")[0], {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"

    def put(self, path, body, content_type="application/json"):
        self.served[path] = (body if isinstance(body, bytes) else json.dumps(body).encode(), content_type)
        return self.url(path)

    def close(self):
        self.httpd.shutdown()


class SignedClient:
    """A client shaped like ChatGPT's: a metadata document declaring ``private_key_jwt`` with a
    ``jwks_uri``, both served by ``pages``, and its own key pair, with which it signs RFC 7523
    assertions for the token endpoint ``audience``."""

    def __init__(self, pages, audience, alg="RS256", path="/oauth/chatgpt/client.json", **document):
        self.pages, self.audience, self.alg = pages, audience, alg
        self.client_id = pages.url(path)
        self.jwks_path = path.rsplit("/", 1)[0] + "/jwks.json"
        self.keys = []  # (kid, private key)
        self.rotate()
        self.document = {"client_id": self.client_id, "client_name": "ChatGPT", "redirect_uris": [REDIRECT],
                         "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                         "token_endpoint_auth_method": "private_key_jwt", "token_endpoint_auth_signing_alg": alg,
                         "jwks_uri": pages.url(self.jwks_path), **document}
        pages.put(path, self.document)

    def rotate(self):
        """A new key pair, published beside the old ones (the newest signs)."""
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if self.alg.startswith(("RS", "PS")) \
            else ec.generate_private_key(ec.SECP256R1())
        self.keys.append((f"key-{len(self.keys) + 1}", key))
        self.pages.put(self.jwks_path, {"keys": [self.jwk(kid, private) for kid, private in self.keys]})

    def jwk(self, kid, private):
        import jwt

        algorithm = jwt.get_algorithm_by_name(self.alg)
        return {**json.loads(algorithm.to_jwk(private.public_key())), "kid": kid, "use": "sig", "alg": self.alg}

    def assertion(self, key=None, kid=None, **claims):
        """A signed client assertion (the newest key's, unless another ``key`` is given), with ``claims``
        overriding the usual ones."""
        import time

        import jwt

        newest_kid, newest = self.keys[-1]
        now = int(time.time())
        body = {"iss": self.client_id, "sub": self.client_id, "aud": self.audience, "iat": now, "exp": now + 300,
                "jti": secrets.token_urlsafe(16), **claims}
        body = {name: value for name, value in body.items() if value is not None}  # (None: a claim left out)
        return jwt.encode(body, key or newest, algorithm=self.alg, headers={"kid": kid or newest_kid})

    def proof(self, **claims):
        """The form fields that prove the client."""
        return {"client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": self.assertion(**claims)}
