"""What a Spark Python worker does once, before its first task of ours."""

from __future__ import annotations


def worker_setup() -> None:
    """Once per Python worker process: move the objects alive now (the imported modules of
    pyspark, pyarrow, pandas, numpy, ...) to the collector's permanent generation.

    Spark's daemon calls ``gc.collect()`` after every task a reused worker runs; over the
    ~75,000 objects those imports leave that is ~30 ms per task, more than decoding a small
    segment takes (a read of 50 segments paid ~1.5 CPU-s for it). Frozen objects are skipped
    by later collections; garbage made by tasks is still collected. The caller imports the
    decoder's modules first (exporter.topic_partitions, which brings exporter.logread, numba
    and the LLVM bindings), so that they are frozen too."""
    import gc

    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
