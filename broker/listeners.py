"""Listeners as Kafka configures them: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

    listeners=PLAINTEXT://:9092,SSL://0.0.0.0:9093
    advertised.listeners=PLAINTEXT://broker:9092,SSL://broker:9093
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL   (Kafka's default map)

A listener's name picks its security protocol through the map; every name is bound once. A
client is told the advertised address of the listener it came in on (Metadata,
FindCoordinator, DescribeCluster), as Kafka does. ``--listen``/``--advertised`` stay the short
form of one PLAINTEXT listener when ``listeners`` is not set.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
WILDCARDS = ("", "0.0.0.0", "::")
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


class ListenerError(ValueError):
    """A listener setting that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class Listener:
    name: str
    security_protocol: str
    host: str  # to bind ("" or a wildcard: every interface)
    port: int
    advertised_host: str
    advertised_port: int  # 0 until bound when the listener asked for port 0

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def bound(self, port: int) -> Listener:
        """This listener once its socket is bound to ``port`` (port 0 picks one)."""
        adv_port = self.advertised_port or port
        return Listener(
            self.name, self.security_protocol, self.host, port, self.advertised_host, adv_port
        )


def parse_endpoints(text: str, setting: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` as (NAME, host, port); names upper-cased, unique."""
    out: list[tuple[str, str, int]] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None:
            raise ListenerError(f"{setting}: {item!r} is not NAME://host:port")
        name, host, port = m["name"].upper(), m["host"].strip("[]"), int(m["port"])
        if port > 65535:
            raise ListenerError(f"{setting}: port {port} of {name} is out of range")
        if any(name == n for n, _, _ in out):
            raise ListenerError(f"{setting}: listener {name} is named twice")
        out.append((name, host, port))
    if not out:
        raise ListenerError(f"{setting}: no listener")
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL"
                f" one of {', '.join(PROTOCOLS)}"
            )
        out[name] = proto
    return out


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """The settings `resolve` reads, by their Kafka names: ``listeners``,
    ``advertised.listeners`` and ``listener.security.protocol.map``. Values, not the config:
    broker.config imports this module to check them."""

    listeners: str | None
    advertised_listeners: str | None
    protocol_map: str


def resolve(
    settings: ListenerSettings, listen: tuple[str, int], advertised: tuple[str, int] | None
) -> list[Listener]:
    """The listeners to bind: from ``listeners`` when it is set, else one PLAINTEXT listener
    on ``listen`` advertised as ``advertised``."""
    protocols = parse_protocol_map(settings.protocol_map)
    text = settings.listeners
    if text is None:
        host, port = listen
        adv_host, adv_port = advertised or (host, 0)
        if adv_port == port:
            adv_port = 0  # follows the bound port (port 0 binds a free one)
        return [Listener("PLAINTEXT", "PLAINTEXT", host, port, _advertisable(adv_host), adv_port)]
    binds = parse_endpoints(text, "listeners")
    adv_text = settings.advertised_listeners
    adv = (
        {n: (h, p) for n, h, p in parse_endpoints(adv_text, "advertised.listeners")}
        if adv_text
        else {}
    )
    for name in adv:
        if name not in {n for n, _, _ in binds}:
            raise ListenerError(f"advertised.listeners: {name} is not in listeners")
    out = []
    ports: set[int] = set()
    for name, host, port in binds:
        proto = protocols.get(name)
        if proto is None:
            raise ListenerError(
                f"listeners: {name} has no security protocol in listener.security.protocol.map"
            )
        if port and port in ports:
            raise ListenerError(f"listeners: port {port} is bound twice")
        ports.add(port)
        adv_host, adv_port = adv.get(name, (host, 0))
        if (adv_host, adv_port) == (host, port):
            adv_port = 0
        out.append(Listener(name, proto, host, port, _advertisable(adv_host), adv_port))
    return out


def _advertisable(host: str) -> str:
    """A wildcard is no address to give a client: Kafka advertises the host's name instead."""
    return socket.gethostname() if host in WILDCARDS else host
