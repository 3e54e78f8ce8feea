"""A throwaway identity provider for the OAUTHBEARER tests: RSA signing keys, their JSON Web
Key Set served over HTTP on loopback (the keys can rotate while it runs), and tokens."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

AUDIENCE = "kcoord"
ISSUER = "https://idp.test"


class IdentityProvider:
    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.published: list[str] = []  # key ids in the served JWKS
        self.fetches = 0
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                idp.fetches += 1
                body = json.dumps(idp.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"

    def add_key(self, kid: str, publish: bool = True) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.append(kid)

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            jwk = RSAAlgorithm.to_jwk(self.keys[kid].public_key(), as_dict=True)
            out.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": out}

    def token(
        self,
        sub: str,
        kid: str,
        *,
        lifetime_s: int = 300,
        aud: str = AUDIENCE,
        iss: str = ISSUER,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {"sub": sub, "aud": aud, "iss": iss, "iat": now, "exp": now + lifetime_s}
        payload.update(claims)
        return jwt.encode(payload, self.keys[kid], algorithm="RS256", headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def unsecured_token(claims: dict[str, Any], alg: str = "none", signature: str = "") -> str:
    """A JWS with no signature, as librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` makes."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': alg})}.{part(claims)}.{signature}"
