"""One member of an exactly-once consume-transform-produce group (confluent-kafka), run as its
own process so a test can SIGKILL it: reads `in`, writes each value upper-cased to `out` and
commits its input offsets in the same transaction. Its transactional id is its slot's, so a
replacement fences a killed predecessor at once (InitProducerId bumps the epoch)."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

BATCH = 20  # records per transaction at most
# Per transaction: keeps the group working long enough to be killed mid-way. At 0.05 s a
# faster transaction path let the group finish its 3,000 records before the fourth kill.
PAUSE_S = 0.15


def main(bootstrap: str, slot: str, idle_s: float) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"eos-{slot}",
            "transaction.timeout.ms": 10000,
            "linger.ms": 5,
            **({"debug": os.environ["EOS_DEBUG"]} if os.environ.get("EOS_DEBUG") else {}),
        }
    )
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        msgs = consumer.consume(BATCH, 0.5)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        last = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce("out", key=m.key(), value=m.value().upper(), partition=m.partition())
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        try:
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as e:
            # (e.g. the group rebalanced under us): abort, and let the supervisor start a
            # fresh process, which resumes from the committed offsets.
            if e.args[0].txn_requires_abort():
                producer.abort_transaction(30)
            print("failed", e, flush=True)
            sys.exit(3)
        print("committed", len(msgs), flush=True)
        time.sleep(PAUSE_S)
    consumer.close()


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # the test asks a stuck member where it is
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
