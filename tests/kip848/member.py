"""A confluent-kafka consumer in the KIP-848 protocol (group.protocol=consumer, or classic when
the fifth argument says so), run as its own process by the tests. It prints one JSON line per
event on stdout, each with "ts" (time.monotonic(), one clock for every process of the machine):

  {"ev": "assigned"|"revoked"|"lost", "tps": [[topic, partition], ...]}
  {"ev": "msg", "t": topic, "p": partition, "o": offset, "v": value}   (committed before printed)
  {"ev": "error", "code": ..., "msg": ...}

and exits cleanly (leaving the group) when its stdin says "stop".
"""

from __future__ import annotations

import json
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException


def emit(**kw: object) -> None:
    sys.stdout.write(json.dumps({**kw, "ts": time.monotonic()}) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, group, topics = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": sys.argv[5] if len(sys.argv) > 5 else "consumer",
        # classic only: the client-side assignor (cooperative-sticky reports owned partitions)
        **({"partition.assignment.strategy": sys.argv[6]} if len(sys.argv) > 6 else {}),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "client.id": sys.argv[4] if len(sys.argv) > 4 else "kip848-member",
    }
    consumer = Consumer(conf)
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    def tps(parts: list) -> list:
        return sorted([p.topic, p.partition] for p in parts)

    consumer.subscribe(
        topics,
        on_assign=lambda c, parts: emit(ev="assigned", tps=tps(parts)),
        on_revoke=lambda c, parts: emit(ev="revoked", tps=tps(parts)),
        on_lost=lambda c, parts: emit(ev="lost", tps=tps(parts)),
    )
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            emit(ev="error", code=msg.error().code(), msg=str(msg.error()))
            continue
        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException as e:
            # The record was consumed but its commit failed: reported with its value, so a
            # test can tell what was read from what was committed.
            emit(ev="error", code=e.args[0].code(), msg=str(e), v=msg.value().decode())
            continue
        emit(ev="msg", t=msg.topic(), p=msg.partition(), o=msg.offset(), v=msg.value().decode())
    consumer.close()
    emit(ev="closed")


if __name__ == "__main__":
    main()
