"""TLS for the SSL and SASL_SSL listeners, configured with Kafka's ``ssl.*`` names (PEM only).

The key store is a PEM file with the private key and the certificate chain
(``ssl.keystore.location``, ``ssl.keystore.type=PEM``; the key encrypted with
``ssl.key.password`` or not encrypted), or the same PEM text inline
(``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``). The trust store, for client
certificates, is a PEM bundle (``ssl.truststore.location`` or inline
``ssl.truststore.certificates``). ``ssl.client.auth``: required, requested or none.

Certificates are reloaded without a restart: :class:`TlsContext` watches the files and loads
them into the same ``ssl.SSLContext`` when they change, so new connections get the new
certificate and established ones keep theirs.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("kcoord.tls")


class SslSettings(Protocol):
    """An endpoint's ssl.* settings: the broker's Config, or a listener's view of it."""

    def get(self, name: str) -> Any: ...


_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """An ``ssl.*`` setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class _Sources:
    keystore: Path | None
    truststore: Path | None

    def stamp(self) -> tuple[float | None, float | None]:
        return (_mtime(self.keystore), _mtime(self.truststore))


def _mtime(path: Path | None) -> float | None:
    if path is None:
        return None
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None


class TlsContext:
    """The server-side SSLContext of the TLS listeners, with :meth:`reload_if_changed`."""

    def __init__(self, config: SslSettings) -> None:
        self._config = config
        kind = (config.get("ssl.keystore.type") or "PEM").upper()
        if kind != "PEM":
            raise TlsConfigError(f"ssl.keystore.type: only PEM is supported, not {kind}")
        self.context = self._new_context()
        ks = config.get("ssl.keystore.location")
        ts = config.get("ssl.truststore.location")
        inline_key = config.get("ssl.keystore.key")
        if ks is None and inline_key is None:
            raise TlsConfigError(
                "a TLS listener needs ssl.keystore.location (a PEM file with the key and the"
                " certificate chain) or ssl.keystore.key and ssl.keystore.certificate.chain"
            )
        self._sources = _Sources(Path(ks) if ks else None, Path(ts) if ts else None)
        self._stamp = self._sources.stamp()
        self._load()

    def _new_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        protocols = [p.strip() for p in self._config.get("ssl.enabled.protocols").split(",")]
        unknown = [p for p in protocols if p not in _VERSIONS]
        if unknown or not protocols:
            raise TlsConfigError(
                f"ssl.enabled.protocols: {', '.join(unknown) or '(none)'} not supported;"
                " use TLSv1.2 and/or TLSv1.3"
            )
        versions = sorted(_VERSIONS[p] for p in protocols)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        ciphers = self._config.get("ssl.cipher.suites")
        if ciphers:
            try:
                ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))
            except ssl.SSLError as e:
                raise TlsConfigError(f"ssl.cipher.suites: {e}") from None
        auth = self._config.get("ssl.client.auth")
        ctx.verify_mode = {
            "required": ssl.CERT_REQUIRED,
            "requested": ssl.CERT_OPTIONAL,
            "none": ssl.CERT_NONE,
        }[auth]
        return ctx

    def _load(self) -> None:
        """(Re)load the key pair and the trust store into the live context."""
        cfg = self._config
        password = cfg.get("ssl.key.password")
        try:
            if self._sources.keystore is not None:
                self.context.load_cert_chain(self._sources.keystore, password=password)
            else:
                self._load_inline_pair(
                    cfg.get("ssl.keystore.certificate.chain"), cfg.get("ssl.keystore.key"), password
                )
            if self._sources.truststore is not None:
                self.context.load_verify_locations(cafile=self._sources.truststore)
            elif cfg.get("ssl.truststore.certificates"):
                self.context.load_verify_locations(cadata=cfg.get("ssl.truststore.certificates"))
            elif self.context.verify_mode != ssl.CERT_NONE:
                raise TlsConfigError(
                    "ssl.client.auth needs a trust store: ssl.truststore.location or"
                    " ssl.truststore.certificates"
                )
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError(f"cannot load the TLS key store or trust store: {e}") from None

    def _load_inline_pair(self, chain: str | None, key: str | None, password: str | None) -> None:
        if not chain or not key:
            raise TlsConfigError("ssl.keystore.key needs ssl.keystore.certificate.chain")
        # load_cert_chain reads files only: a private temporary file, removed at once.
        fd, name = tempfile.mkstemp(suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(key.strip() + "\n" + chain.strip() + "\n")
            self.context.load_cert_chain(name, password=password)
        finally:
            os.unlink(name)

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since the last load; True if reloaded. A
        broken new file is logged and the old certificate stays in use."""
        stamp = self._sources.stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self._load()
        except TlsConfigError as e:
            log.error("TLS files changed but cannot be loaded, keeping the previous ones: %s", e)
            return False
        log.info("TLS key store / trust store reloaded")
        return True


def client_context(config: SslSettings) -> ssl.SSLContext:
    """The client side of this broker's TLS, for its connections to other nodes (Kafka's
    inter-broker TLS): other nodes' certificates checked against ``ssl.truststore.*`` (the
    system's CAs if none is set), and this broker's key store presented as its certificate."""
    cafile = config.get("ssl.truststore.location")
    cadata = config.get("ssl.truststore.certificates")
    try:
        ctx = ssl.create_default_context(cafile=cafile, cadata=cadata if not cafile else None)
        keystore = config.get("ssl.keystore.location")
        password = config.get("ssl.key.password")
        if keystore:
            ctx.load_cert_chain(keystore, password=password)
        elif config.get("ssl.keystore.key"):
            fd, name = tempfile.mkstemp(suffix=".pem")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(config.get("ssl.keystore.key").strip() + "\n")
                    f.write((config.get("ssl.keystore.certificate.chain") or "").strip() + "\n")
                ctx.load_cert_chain(name, password=password)
            finally:
                os.unlink(name)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"the inter-broker TLS client: {e}") from None
    return ctx


def principal_of(ssl_object: ssl.SSLObject | None, rules: str) -> str:
    """The Kafka principal of a TLS peer: ``User:`` + its certificate's distinguished name
    mapped by ``ssl.principal.mapping.rules``; ``User:ANONYMOUS`` without a certificate."""
    if ssl_object is None:
        return "User:ANONYMOUS"
    cert = ssl_object.getpeercert()
    if not cert:
        return "User:ANONYMOUS"
    return "User:" + map_principal(distinguished_name(cert), rules)


def distinguished_name(cert: dict) -> str:
    """RFC 2253 order (most specific first), as Java's X500Principal.getName() gives it."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        parts = []
        for key, value in rdn:
            short = _SHORT.get(key, key)
            parts.append(f"{short}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


_RULE_TEXT = r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)"
_RULE = re.compile(_RULE_TEXT)
_ANY_RULE = re.compile("DEFAULT|" + _RULE_TEXT)


def map_principal(dn: str, rules: str) -> str:
    """Kafka's SslPrincipalMapper: the first RULE:pattern/replacement/[L|U] whose pattern
    matches the whole name rewrites it; DEFAULT keeps the name as it is."""
    for rule in _split_rules(rules):
        if rule == "DEFAULT":
            return dn
        m = _RULE.fullmatch(rule)
        if m is None:
            raise TlsConfigError(f"ssl.principal.mapping.rules: {rule!r} is not a rule")
        pattern, replacement, case = (m[1].replace("\\/", "/"), m[2].replace("\\/", "/"), m[3])
        if re.fullmatch(pattern, dn) is None:
            continue
        # Java's $1 group references become Python's \1.
        out = re.sub(pattern, re.sub(r"\$(\d+)", r"\\\1", replacement), dn, count=1)
        return out.lower() if case == "L" else out.upper() if case == "U" else out
    return dn


def _split_rules(rules: str) -> list[str]:
    return [m.group(0).strip() for m in _ANY_RULE.finditer(rules)] or ["DEFAULT"]


def check_rules(rules: str) -> str:
    """Validate ``ssl.principal.mapping.rules`` at start-up."""
    for rule in _split_rules(rules):
        if rule != "DEFAULT" and _RULE.fullmatch(rule) is None:
            raise ValueError(f"{rule!r} is not DEFAULT or RULE:pattern/replacement/[LU]")
    leftover = _ANY_RULE.sub("", rules)
    if leftover.strip(" ,\n"):
        raise ValueError(f"cannot read {leftover.strip()!r}")
    return rules
