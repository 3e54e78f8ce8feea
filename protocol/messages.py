"""Every declared message, compiled: classes by name and codecs by API key.

from protocol.messages import HeartbeatRequest, REQUESTS
req = HeartbeatRequest.decode(body, version)
REQUESTS[12].decode(body, version)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.codec import MessageType
from protocol.schema import messages as _decls

TYPES: dict[str, MessageType] = {d.name: MessageType(d) for d in _decls.ALL}
REQUESTS: dict[int, MessageType] = {
    m.api_key: m for m in TYPES.values() if m.decl.kind == "request" and m.api_key is not None
}
RESPONSES: dict[int, MessageType] = {
    m.api_key: m for m in TYPES.values() if m.decl.kind == "response" and m.api_key is not None
}

if TYPE_CHECKING:
    # What the update below makes, as mypy and editors can see it (protocol.schema.gen_stubs).
    from protocol.message_classes import *  # noqa: F403
else:
    globals().update({name: mt.cls for name, mt in TYPES.items()})
