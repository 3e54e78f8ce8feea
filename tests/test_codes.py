from protocol.api_keys import ApiKey
from protocol.errors import RETRIABLE, ErrorCode
from protocol.schema import messages


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


def test_api_keys_match_the_declared_messages():
    # The declarations are Kafka's message definitions as the generator read them (it checks
    # them against the definitions themselves: python -m protocol.schema.import_spec --check).
    requests = {d.name: d for d in messages.ALL if d.kind == "request"}
    checked = 0
    for key in ApiKey:
        decl = requests.get(key.message_name + "Request")
        if decl is not None:  # (an API Kafka renamed since 4.0 is declared by its old name)
            assert decl.api_key == key, (key, decl.api_key)
            checked += 1
    assert checked >= 27
