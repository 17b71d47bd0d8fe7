"""A tiny OpenID Connect provider for tests, on 127.0.0.1 only: discovery, an authorize endpoint that signs in at
once as the user the test chose (no login form), a token endpoint that checks the client, the code, its redirect_uri
and PKCE and returns an RS256-signed id_token, the JWKS, and userinfo. It is enough for Streamlit's `st.login`
(Authlib) and nothing more: one client, codes kept in memory, no refresh tokens, no consent."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qs, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import RSAKey

TOKEN_LIFETIME_S = 300


@dataclass(frozen=True)
class FakeUser:
    sub: str
    email: str
    name: str
    email_verified: bool = True

    def claims(self) -> dict:
        return {"sub": self.sub, "email": self.email, "name": self.name, "email_verified": self.email_verified}


@dataclass
class _Grant:
    user: FakeUser
    redirect_uri: str
    nonce: str | None
    code_challenge: str | None


class FakeOIDC:
    """`with FakeOIDC() as provider:` serves at `provider.issuer`; `provider.user` is who the next sign-in is (set it
    before the browser goes to the authorize endpoint); `provider.client_id` and `.client_secret` are its one
    client's."""

    def __init__(self, client_id: str = "amp-lab-test"):
        self.client_id = client_id
        self.client_secret = secrets.token_urlsafe(24)
        self.user: FakeUser | None = None
        self.token_requests: list[dict] = []  # how each token exchange authenticated, for the test's asserts
        self._codes: dict[str, _Grant] = {}
        self._access: dict[str, FakeUser] = {}
        self._lock = threading.Lock()
        self._key = RSAKey.generate_key(2048, parameters={"kid": "fake-oidc-1", "use": "sig", "alg": "RS256"})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-oidc", daemon=True)

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def discovery(self) -> dict:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["iss", "sub", "aud", "exp", "iat", "nonce", "email", "email_verified", "name"],
        }

    def jwks(self) -> dict:
        return {"keys": [self._key.as_dict(private=False)]}

    def authorize(self, query: dict[str, str]) -> tuple[int, str]:
        """(status, where to): a redirect back with a code and the caller's state, or a 400 with the reason."""
        if query.get("client_id") != self.client_id:
            return 400, f"unknown client_id {query.get('client_id')!r}"
        if query.get("response_type") != "code" or "openid" not in query.get("scope", "").split():
            return 400, "only response_type=code with scope openid"
        redirect_uri = query.get("redirect_uri", "")
        if not redirect_uri.startswith(("http://127.0.0.1:", "http://localhost:")):
            return 400, f"redirect_uri {redirect_uri!r} is not on this machine"
        if self.user is None:
            return 400, "the test has not said who signs in (FakeOIDC.user)"
        if query.get("code_challenge") and query.get("code_challenge_method") != "S256":
            return 400, "only S256 code challenges"
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = _Grant(self.user, redirect_uri, query.get("nonce"), query.get("code_challenge"))
        back = {"code": code, **({"state": query["state"]} if "state" in query else {})}
        return 302, f"{redirect_uri}?{urlencode(back)}"

    def token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict]:
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.startswith("Basic "):
            client_id, _, client_secret = base64.b64decode(authorization[6:]).decode().partition(":")
        self.token_requests.append({
            "auth": "client_secret_basic" if authorization else "client_secret_post",
            "pkce": "code_verifier" in form,
        })
        if (client_id, client_secret) != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # a code works once
        if grant is None or form.get("redirect_uri") != grant.redirect_uri:
            return 400, {"error": "invalid_grant"}
        if grant.code_challenge and _s256(form.get("code_verifier", "")) != grant.code_challenge:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verifier does not match"}
        access_token = secrets.token_urlsafe(24)
        with self._lock:
            self._access[access_token] = grant.user
        now = int(time.time())
        claims = {
            "iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + TOKEN_LIFETIME_S,
            "at_hash": _half_hash(access_token), **grant.user.claims(),
            **({"nonce": grant.nonce} if grant.nonce else {}),
        }
        id_token = jwt.encode({"alg": "RS256", "kid": self._key.kid}, claims, self._key)
        return 200, {
            "access_token": access_token, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME_S,
            "id_token": id_token, "scope": "openid email profile",
        }

    def userinfo(self, authorization: str | None) -> tuple[int, dict]:
        user = self._access.get((authorization or "").removeprefix("Bearer "))
        return (200, user.claims()) if user else (401, {"error": "invalid_token"})


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _half_hash(access_token: str) -> str:
    digest = hashlib.sha256(access_token.encode()).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode()


def _handler_for(provider: FakeOIDC) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            url = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._json(200, provider.discovery())
            elif url.path == "/jwks":
                self._json(200, provider.jwks())
            elif url.path == "/authorize":
                status, where = provider.authorize(query)
                if status == 302:
                    self.send_response(302)
                    self.send_header("Location", where)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._json(status, {"error": "invalid_request", "error_description": where})
            elif url.path == "/userinfo":
                self._json(*provider.userinfo(self.headers.get("Authorization")))
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self):
            if urlsplit(self.path).path != "/token":
                self._json(404, {"error": "not_found"})
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {key: values[0] for key, values in parse_qs(body).items()}
            self._json(*provider.token(form, self.headers.get("Authorization")))

        def _json(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: pytest shows failures, not every request
            pass

    return Handler
