"""ConsumerGroupHeartbeat replies kept encoded (broker/apis/consumer_group_heartbeat.py)."""

from __future__ import annotations

from broker.apis.consumer_group_heartbeat import _plain_body
from protocol.api_keys import ApiKey
from protocol.encoded import Encoded
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES
from protocol.messages import ConsumerGroupHeartbeatResponse as Response

CODEC = RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT]


def reply(epoch: int = 3, interval: int = 5000, **kw: object) -> Response:
    return Response(member_id="m-1", member_epoch=epoch, heartbeat_interval_ms=interval, **kw)


def test_a_plain_reply_is_sent_as_the_bytes_the_encoder_makes() -> None:
    for version in (0, 1):
        body = _plain_body(reply(), version)
        assert isinstance(body, Encoded)
        assert body.body == CODEC.encode(reply(), version)
        assert CODEC.decode(body.body, version)[0] == reply()
        assert _plain_body(reply(), version) is body  # kept


def test_each_epoch_and_interval_has_its_own_bytes() -> None:
    first = _plain_body(reply(), 1)
    later = _plain_body(reply(epoch=4), 1)
    slower = _plain_body(reply(interval=100), 1)
    assert isinstance(later, Encoded) and isinstance(slower, Encoded)
    assert CODEC.decode(later.body, 1)[0].member_epoch == 4
    assert CODEC.decode(slower.body, 1)[0].heartbeat_interval_ms == 100
    assert len({id(first), id(later), id(slower)}) == 3


def test_errors_and_messages_are_encoded_as_usual() -> None:
    fenced = reply(error_code=ErrorCode.FENCED_MEMBER_EPOCH, error_message="fenced")
    assert _plain_body(fenced, 1) is fenced
    throttled = reply(throttle_time_ms=10)
    assert _plain_body(throttled, 1) is throttled
