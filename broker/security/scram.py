"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's brokers speak them: the
credentials kept salted (salt, stored key, server key, iterations; never the password), and
the server side of one authentication exchange.

Kafka's differences from the RFC: no channel binding (the gs2 header is ``n,,`` or
``n,a=<authzid>,`` with the authorization id equal to the user name), and user names carry
``=2C``/``=3D`` escapes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# The int8 of DescribeUserScramCredentials / AlterUserScramCredentials.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds


class ScramError(Exception):
    """The exchange failed; the message is for the log, never for the client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """What AlterUserScramCredentials sends: the client salts the password itself."""
        h = MECHANISMS[mechanism]
        client_key = _hmac(h, salted_password, b"Client Key")
        return cls(
            salt,
            hashlib.new(h, client_key).digest(),
            _hmac(h, salted_password, b"Server Key"),
            iterations,
        )

    def check_password(self, mechanism: str, password: str) -> bool:
        """For SASL/PLAIN against the same user database."""
        h = MECHANISMS[mechanism]
        salted = salted_password(mechanism, password, self.salt, self.iterations)
        client_key = _hmac(h, salted, b"Client Key")
        return hmac.compare_digest(hashlib.new(h, client_key).digest(), self.stored_key)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def _hmac(h: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, h).digest()


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {part!r}")
        out.setdefault(key, value)
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange: :meth:`first` answers the client-first message, :meth:`final` the
    client-final one; ``lookup(user)`` gives the user's credential for this mechanism or None.
    An unknown user fails at the final step, with the same work and message as a wrong
    password, so the exchange tells an attacker nothing about which users exist."""

    def __init__(self, mechanism: str, lookup, nonce: str | None = None) -> None:  # noqa: ANN001
        self.mechanism = mechanism
        self._h = MECHANISMS[mechanism]
        self._lookup = lookup
        self._server_nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode()
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.done = False

    def first(self, client_first: bytes) -> bytes:
        text = client_first.decode("utf-8", "strict")
        if not text.startswith(("n,", "y,")):
            raise ScramError("channel binding is not supported")
        _, authzid, bare = text.split(",", 2)
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs:
            raise ScramError("client-first message lacks n= or r=")
        self.user = _unescape_name(attrs["n"])
        if authzid and authzid != "a=" + attrs["n"]:
            raise ScramError("the authorization id must be the user name")
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        self._credential = self._lookup(self.user)
        cred = self._credential or self._decoy()
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def _decoy(self) -> ScramCredential:
        # A stable fake salt per user: asking twice does not reveal the user is unknown.
        salt = hashlib.sha256(b"kcoord-decoy:" + (self.user or "").encode()).digest()
        return ScramCredential(salt, b"", b"", MIN_ITERATIONS)

    def final(self, client_final: bytes) -> bytes:
        text = client_final.decode("utf-8", "strict")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message lacks its proof")
        attrs = _attributes(without_proof)
        # Kafka accepts a final nonce that ends with the server's (endsWith, not equals):
        # librdkafka before 2.1 puts the client nonce in front of the whole server nonce again.
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("nonce mismatch")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," / "y,,"
            # Kafka accepts the gs2 header it saw; an authzid header is base64 of "n,a=..,".
            if base64.b64decode(attrs.get("c", "")).decode() not in ("n,,", f"n,a={self.user},"):
                raise ScramError("channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        proof = base64.b64decode(proof_text)
        if cred is None:
            raise ScramError(f"unknown user {self.user!r}")
        signature = _hmac(self._h, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._h, client_key).digest(), cred.stored_key):
            raise ScramError(f"invalid credentials for {self.user!r}")
        self.done = True
        server_signature = _hmac(self._h, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
