"""Demo producer (kafka-python): creates the topic, then sends keyed messages at a steady rate
until stopped. SIGTERM flushes what is buffered and exits 0.

    python3 producer.py --bootstrap broker:9092 --topic demo --partitions 3 --rate 20
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="broker:9092")
    ap.add_argument("--topic", default="demo")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0, help="messages per second")
    args = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))

    deadline = time.monotonic() + 60
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="demo-admin")
            break
        except KafkaError:  # no broker yet
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    try:
        admin.create_topics([NewTopic(args.topic, args.partitions, 1)])
        print(f"created topic {args.topic} ({args.partitions} partitions)", flush=True)
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()

    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap, client_id="demo-producer", acks="all", linger_ms=20
    )
    sent, started, interval = 0, time.monotonic(), 1.0 / args.rate
    while not stop:
        producer.send(args.topic, key=f"k{sent % 97}".encode(), value=f"m{sent}".encode())
        sent += 1
        if sent % max(int(args.rate * 10), 1) == 0:
            print(f"sent {sent} messages", flush=True)
        time.sleep(max(0.0, started + sent * interval - time.monotonic()))
    producer.flush(10)
    producer.close(10)
    print(f"stopped after {sent} messages", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
