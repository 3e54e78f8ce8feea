"""Every declared message, compiled: classes by name and codecs by API key.

from protocol.messages import HeartbeatRequest, REQUESTS
req = HeartbeatRequest.decode(body, version)
REQUESTS[12].decode(body, version)
"""

from __future__ import annotations

from protocol.codec import MessageType
from protocol.message_classes import *  # noqa: F403 - the classes, by name
from protocol.message_classes import CLASSES as _CLASSES
from protocol.schema import messages as _decls

TYPES: dict[str, MessageType] = {d.name: MessageType(d, _CLASSES[d.name]) for d in _decls.ALL}
REQUESTS: dict[int, MessageType] = {
    m.api_key: m for m in TYPES.values() if m.decl.kind == "request" and m.api_key is not None
}
RESPONSES: dict[int, MessageType] = {
    m.api_key: m for m in TYPES.values() if m.decl.kind == "response" and m.api_key is not None
}
