"""What the share-group side tells the runtime (in `Result.events`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareMemberGone:
    """A member left its share group or was fenced: the broker releases the records it holds
    and closes its share session."""

    group_id: str
    member_id: str
