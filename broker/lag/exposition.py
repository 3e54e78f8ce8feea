"""The lag model's Prometheus families, written as exposition text directly.

prometheus_client's families cost about 30 us per sample to build and format; the lag series
are tens of thousands (1,000 groups x 10 partitions x 3 families), so they are written here
with one formatted line per sample, and kept until the model is evaluated again (the values
are those of the last evaluation in any case). ``bench/lag.py`` times it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.lag.model import LagModel

if TYPE_CHECKING:
    from broker.lag.tracker import LagTracker


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


PARTITION_FAMILIES = (
    ("kcoord_consumer_group_lag", "Records a group has yet to consume, per partition (log end"
     " minus the committed offset, or minus the log start when the offset fell below it)."),
    ("kcoord_consumer_group_lag_seconds", "Age of the first record a group has not consumed, per"
     " partition (its timestamp read from the log; 0 when caught up)."),
    ("kcoord_consumer_group_status", "Burrow's status of a group's partition over its last"
     " commits: 1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND."),
)  # fmt: skip
GROUP_FAMILIES = (
    ("kcoord_consumer_group_total_lag", "Records a group has yet to consume, summed over its"
     " partitions."),
    ("kcoord_consumer_group_max_lag_seconds", "Age of the oldest record a group has not"
     " consumed, over its partitions."),
    ("kcoord_consumer_group_overall_status", "Burrow's status of a group (its worst partition):"
     " 1 OK, 2 WARN, 3 ERR."),
)  # fmt: skip


def render(
    model: LagModel, now: int, allowed: Callable[[str], bool], partition_groups: int
) -> bytes:
    """Group-level series for every allowed group; partition-level ones for the first
    ``partition_groups`` of them by name."""
    names = sorted(g for g in model.groups if allowed(g))
    (lag_name, _), (secs_name, _), (status_name, _) = PARTITION_FAMILIES
    lags: list[str] = []
    secs: list[str] = []
    statuses: list[str] = []
    per_group: list[list[str]] = [[], [], []]
    for i, name in enumerate(names):
        g = model.groups[name]
        gl = f'group="{escape(name)}"'
        tail = f'{{{gl},type="{g.kind}"}} '
        per_group[0].append(f"{GROUP_FAMILIES[0][0]}{tail}{g.total_lag}\n")
        per_group[1].append(f"{GROUP_FAMILIES[1][0]}{tail}{g.max_time_lag_ms / 1000}\n")
        per_group[2].append(f"{GROUP_FAMILIES[2][0]}{tail}{g.status}\n")
        if i >= partition_groups:
            continue
        for topic, parts in g.topics.items():
            head = f'{{{gl},topic="{escape(topic)}",partition="'
            for p, pl in parts.items():
                labels = f'{head}{p}"}} '
                lag = pl.lag()  # time lag inline: PartitionLag.time_lag_ms without a second lag()
                lags.append(f"{lag_name}{labels}{lag}\n")
                if lag == 0:
                    secs.append(f"{secs_name}{labels}0.0\n")
                elif pl.ts_offset == pl.target():
                    secs.append(f"{secs_name}{labels}{max(now - pl.ts, 0) / 1000}\n")
                statuses.append(f"{status_name}{labels}{pl.status}\n")
    out: list[str] = []
    families = PARTITION_FAMILIES + GROUP_FAMILIES
    for (name, doc), lines in zip(families, [lags, secs, statuses, *per_group], strict=True):
        out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
        out.extend(lines)
    return "".join(out).encode()


class LagExposition:
    """The rendered block, kept until the tracker's next evaluation."""

    def __init__(self, tracker: LagTracker, allowed: Callable[[str], bool], partition_groups: int):
        self.tracker = tracker
        self.allowed = allowed
        self.partition_groups = partition_groups
        self._at = -1
        self._text = b""

    def text(self) -> bytes:
        t = self.tracker
        at = t.last_tick_ms
        if at != self._at:
            body = render(t.model, at, self.allowed, self.partition_groups)
            tracked = sum(g.count() for g in t.model.groups.values())
            body += (
                "# HELP kcoord_lag_group_partitions Group-partitions the live lag model follows.\n"
                "# TYPE kcoord_lag_group_partitions gauge\n"
                f"kcoord_lag_group_partitions {tracked}\n"
                "# HELP kcoord_lag_evaluation_seconds How long the last evaluation of the lag"
                " model took.\n"
                "# TYPE kcoord_lag_evaluation_seconds gauge\n"
                f"kcoord_lag_evaluation_seconds {t.tick_seconds}\n"
            ).encode()
            self._text, self._at = body, at
        return self._text
