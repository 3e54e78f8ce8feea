"""Demo consumer group member (confluent-kafka, classic protocol): consumes a topic and
commits what it processed every second. Run several for a group. SIGTERM commits, leaves the
group and exits 0.

    python3 consumer.py --bootstrap broker:9092 --topic demo --group demo-group
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import time

from confluent_kafka import Consumer, KafkaError


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="broker:9092")
    ap.add_argument("--topic", default="demo")
    ap.add_argument("--group", default="demo-group")
    args = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": f"demo-consumer-{socket.gethostname()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "session.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, ps: print(f"assigned {[p.partition for p in ps]}", flush=True),
        on_revoke=lambda c, ps: print(f"revoked {[p.partition for p in ps]}", flush=True),
    )
    consumed, last_report = 0, time.monotonic()
    while not stop:
        msg = consumer.poll(0.5)
        if msg is not None:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    print(f"consumer error: {msg.error()}", flush=True)
                continue
            consumed += 1
        if time.monotonic() - last_report > 10:
            print(f"consumed {consumed} messages", flush=True)
            last_report = time.monotonic()
    consumer.close()  # commits the last offsets and leaves the group
    print(f"stopped after {consumed} messages", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
