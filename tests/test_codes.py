import json
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import RETRIABLE, ErrorCode

SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "kafka-spec" / "message"


def test_error_codes_spot_checks():
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1 and ErrorCode.NONE == 0
    assert ErrorCode(15) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert ErrorCode(35) is ErrorCode.UNSUPPORTED_VERSION
    assert ErrorCode(79) is ErrorCode.MEMBER_ID_REQUIRED
    assert [ErrorCode(c).name for c in range(110, 114)] == [
        "FENCED_MEMBER_EPOCH",
        "UNRELEASED_INSTANCE_ID",
        "UNSUPPORTED_ASSIGNOR",
        "STALE_MEMBER_EPOCH",
    ]
    # Kafka defines every code from -1 to the highest one, with no gaps.
    assert sorted(ErrorCode) == list(range(-1, max(ErrorCode) + 1))
    assert max(ErrorCode) == 133


def test_retriable():
    assert ErrorCode.NOT_COORDINATOR.retriable and ErrorCode.COORDINATOR_LOAD_IN_PROGRESS.retriable
    assert not ErrorCode.REBALANCE_IN_PROGRESS.retriable
    assert not ErrorCode.UNKNOWN_MEMBER_ID.retriable
    assert not ErrorCode.NONE.retriable
    assert all(isinstance(code, ErrorCode) for code in RETRIABLE)


def test_error_code_of_unknown_number():
    assert ErrorCode.of(16) is ErrorCode.NOT_COORDINATOR
    assert ErrorCode.of(9999) == 9999


def test_api_keys_spot_checks():
    assert ApiKey.API_VERSIONS == 18 and ApiKey.CONSUMER_GROUP_HEARTBEAT == 68
    assert ApiKey.JOIN_GROUP.message_name == "JoinGroup"
    assert sorted(ApiKey) == list(range(0, 93))


@pytest.mark.skipif(not SPEC.is_dir(), reason="needs ../shared/kafka-spec beside the repo")
def test_api_keys_match_kafka_message_definitions():
    checked = 0
    for path in sorted(SPEC.glob("*Request.json")):
        lines = path.read_text().splitlines()
        spec = json.loads("\n".join(x for x in lines if not x.lstrip().startswith("//")))
        if "apiKey" in spec:
            assert ApiKey(spec["apiKey"]).message_name + "Request" == spec["name"]
            checked += 1
    assert checked >= 27
