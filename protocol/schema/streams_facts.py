"""The facts of Kafka 4.3's streams-group records (KIP-1071), input to `import_spec`.

The kafka-spec folder has no StreamsGroup* record definitions, so their facts are written here
in the shape of Kafka's JSON definitions (the `coordinator-key` / `coordinator-value` layout,
where `apiKey` is the record type): names, types, versions, nullability, tags and defaults, as
in apache/kafka's `group-coordinator/src/main/resources/common/message/StreamsGroup*.json` on
the 4.3 branch. Record types 17-23; Kafka 4.3 no longer writes type 18
(StreamsGroupPartitionMetadata: the metadata hash in StreamsGroupMetadataValue replaced it).
"""

from __future__ import annotations


def _key(name: str, api_key: int, member: bool) -> dict:
    fields = [{"name": "GroupId", "type": "string", "versions": "0"}]
    if member:
        fields.append({"name": "MemberId", "type": "string", "versions": "0"})
    return {
        "apiKey": api_key,
        "type": "coordinator-key",
        "name": name,
        "validVersions": "0",
        "flexibleVersions": "none",
        "fields": fields,
    }


def _value(name: str, api_key: int, fields: list[dict], common: list[dict] | None = None) -> dict:
    spec = {
        "apiKey": api_key,
        "type": "coordinator-value",
        "name": name,
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": fields,
    }
    if common:
        spec["commonStructs"] = common
    return spec


def _f(name: str, type_: str, **extra: object) -> dict:
    return {"name": name, "type": type_, "versions": "0+", **extra}


def _struct(name: str, fields: list[dict]) -> dict:
    return {"name": name, "versions": "0+", "fields": fields}


_KEY_VALUE = [_f("Key", "string"), _f("Value", "string")]
_TASK_IDS = [_f("SubtopologyId", "string"), _f("Partitions", "[]int32")]
_TOPIC_INFO = [
    _f("Name", "string"),
    _f("Partitions", "int32"),
    _f("ReplicationFactor", "int16"),
    _f("TopicConfigs", "[]TopicConfig"),
]

RECORDS: list[dict] = [
    _key("StreamsGroupMetadataKey", 17, member=False),
    _value(
        "StreamsGroupMetadataValue",
        17,
        [
            _f("Epoch", "int32"),
            _f("MetadataHash", "int64"),
            _f("ValidatedTopologyEpoch", "int32", taggedVersions="0+", tag=0, default=-1),
            _f(
                "LastAssignmentConfigs",
                "[]LastAssignmentConfig",
                taggedVersions="0+",
                nullableVersions="0+",
                tag=1,
                default=None,
            ),
        ],
        [_struct("LastAssignmentConfig", _KEY_VALUE)],
    ),
    _key("StreamsGroupMemberMetadataKey", 19, member=True),
    _value(
        "StreamsGroupMemberMetadataValue",
        19,
        [
            _f("InstanceId", "string", nullableVersions="0+"),
            _f("RackId", "string", nullableVersions="0+"),
            _f("ClientId", "string"),
            _f("ClientHost", "string"),
            _f("RebalanceTimeoutMs", "int32", default=-1),
            _f("TopologyEpoch", "int32"),
            _f("ProcessId", "string"),
            _f("UserEndpoint", "Endpoint", nullableVersions="0+", default="null"),
            _f("ClientTags", "[]KeyValue"),
        ],
        [
            _struct("Endpoint", [_f("Host", "string"), _f("Port", "uint16")]),
            _struct("KeyValue", _KEY_VALUE),
        ],
    ),
    _key("StreamsGroupTargetAssignmentMetadataKey", 20, member=False),
    _value(
        "StreamsGroupTargetAssignmentMetadataValue",
        20,
        [
            _f("AssignmentEpoch", "int32"),
            # KIP-1263 (4.3): when the assignment was computed, for the assignment interval.
            _f("AssignmentTimestamp", "int64", taggedVersions="0+", tag=0, default=0),
        ],
    ),
    _key("StreamsGroupTargetAssignmentMemberKey", 21, member=True),
    _value(
        "StreamsGroupTargetAssignmentMemberValue",
        21,
        [
            _f("ActiveTasks", "[]TaskIds"),
            _f("StandbyTasks", "[]TaskIds"),
            _f("WarmupTasks", "[]TaskIds"),
        ],
        [_struct("TaskIds", _TASK_IDS)],
    ),
    _key("StreamsGroupCurrentMemberAssignmentKey", 22, member=True),
    _value(
        "StreamsGroupCurrentMemberAssignmentValue",
        22,
        [
            _f("MemberEpoch", "int32"),
            _f("PreviousMemberEpoch", "int32"),
            _f("State", "int8"),
            _f("ActiveTasks", "[]TaskIds"),
            _f("StandbyTasks", "[]TaskIds"),
            _f("WarmupTasks", "[]TaskIds"),
            _f("ActiveTasksPendingRevocation", "[]TaskIds"),
            _f("StandbyTasksPendingRevocation", "[]TaskIds"),
            _f("WarmupTasksPendingRevocation", "[]TaskIds"),
        ],
        [
            _struct(
                "TaskIds",
                [
                    *_TASK_IDS,
                    # KIP-1251 (4.3): the epoch each active task was assigned at.
                    _f(
                        "AssignmentEpochs",
                        "[]int32",
                        nullableVersions="0+",
                        taggedVersions="0+",
                        tag=0,
                        default=None,
                    ),
                ],
            )
        ],
    ),
    _key("StreamsGroupTopologyKey", 23, member=False),
    _value(
        "StreamsGroupTopologyValue",
        23,
        [
            _f("Epoch", "int32"),
            _f(
                "Subtopologies",
                "[]Subtopology",
                fields=[
                    _f("SubtopologyId", "string"),
                    _f("SourceTopics", "[]string"),
                    _f("SourceTopicRegex", "[]string"),
                    _f("StateChangelogTopics", "[]TopicInfo"),
                    _f("RepartitionSinkTopics", "[]string"),
                    _f("RepartitionSourceTopics", "[]TopicInfo"),
                    _f(
                        "CopartitionGroups",
                        "[]CopartitionGroup",
                        fields=[
                            _f("SourceTopics", "[]int16"),
                            _f("SourceTopicRegex", "[]int16"),
                            _f("RepartitionSourceTopics", "[]int16"),
                        ],
                    ),
                ],
            ),
        ],
        [
            _struct("TopicConfig", [_f("key", "string"), _f("value", "string")]),
            _struct("TopicInfo", _TOPIC_INFO),
        ],
    ),
]
