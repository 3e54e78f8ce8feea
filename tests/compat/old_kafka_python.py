"""Run by an old kafka-python (2.0.2, in its own venv) pinned to an old broker version:
produce, then consume in a group and commit, and print one JSON line.
    python old_kafka_python.py BOOTSTRAP TOPIC GROUP MAJOR.MINOR.PATCH [gzip]"""

import json
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, topic, group, version = sys.argv[1:5]
compression = sys.argv[5] if len(sys.argv) > 5 else None
api_version = tuple(int(x) for x in version.split("."))
N = 50

producer = KafkaProducer(
    bootstrap_servers=bootstrap, api_version=api_version, compression_type=compression
)
for i in range(N):
    producer.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i, partition=0)
producer.flush(30)
producer.close()

consumer = KafkaConsumer(
    topic,
    bootstrap_servers=bootstrap,
    api_version=api_version,
    group_id=group,
    auto_offset_reset="earliest",
    enable_auto_commit=False,
    consumer_timeout_ms=15000,
)
seen = []
for m in consumer:
    seen.append((m.offset, m.value.decode(), m.timestamp))
    if len(seen) == N:
        break
consumer.commit()
committed = consumer.committed(TopicPartition(topic, 0))
consumer.close()
print(
    json.dumps(
        {
            "values": [v for _, v, _ in seen],
            "offsets": [o for o, _, _ in seen],
            "timestamps": [t for _, _, t in seen],
            "committed": committed,
        }
    )
)
