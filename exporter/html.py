"""A self-contained HTML report: inline CSS and SVG charts, no script, no external files, so it
opens from disk in any browser without a server or a network."""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Sequence
from typing import Any

PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
]
STATUS_COLORS = {
    "OK": "#2e7d32",
    "WARN": "#f9a825",
    "ERR": "#c62828",
    "STOP": "#c62828",
    "STALL": "#ad1457",
    "REWIND": "#6a1b9a",
    "NO_COMMIT": "#757575",
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{margin:0 0 4px 0;font-size:22px}h2{font-size:17px;margin:28px 0 8px 0}
.meta{color:#666;font-size:13px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:12.5px}
th,td{border-bottom:1px solid #e5e5e5;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f5f5f5;position:sticky;top:0;white-space:normal;vertical-align:bottom}
td.l,th.l,td.w,th.w{text-align:left}
td.w{white-space:normal;overflow-wrap:anywhere;min-width:13em;max-width:24em}
svg{max-width:100%;height:auto}
.st{color:#fff;border-radius:3px;padding:1px 6px;font-weight:600;font-size:11.5px}
.warn{background:#fff8e1;border:1px solid #f9a825;padding:6px 10px;font-size:13px}
svg text{font-size:11px;fill:#333}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}
"""


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def fmt_ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{s / 60:.1f}m"
    if s < 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def fmt_num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def badge(status: str | None) -> str:
    if not status:
        return "-"
    color = STATUS_COLORS.get(status, "#555")
    return f'<span class="st" style="background:{color}">{esc(status)}</span>'


def nice_ticks(vmax: float, count: int = 4, integer: bool = True) -> list[float]:
    """Axis ticks from 0 to at least ``vmax``: about ``count`` steps of 1, 2, 2.5 or 5 times a
    power of ten, whole numbers when ``integer`` (lags are counts: a range of 0-1 has the
    ticks 0 and 1, never 0, 0.25, ... printed as "0, 0, 0, 1, 1")."""
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / count
    exp = 10 ** math.floor(math.log10(raw))
    step = next((m * exp for m in (1, 2, 2.5, 5, 10) if raw <= m * exp), 10 * exp)
    if integer:
        step = max(1.0, math.ceil(step))
    n = math.ceil(vmax / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _tick_label(v: float, step: float) -> str:
    if step >= 1 and float(v).is_integer():
        return fmt_num(int(v))
    digits = max(0, -math.floor(math.log10(step)))
    return fmt_num(float(v), digits)


def _svg_open(width: int, height: int, extra: str = "") -> str:
    """An SVG drawn at ``width`` x ``height`` that shrinks with a narrower window (viewBox)."""
    attrs = f" {extra}" if extra else ""
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}"{attrs}'
        ' xmlns="http://www.w3.org/2000/svg">'
    )


def _time_labels(t0: float, t1: float, x: Any, y: float) -> list[str]:
    """Five time labels along an axis; the first and last kept inside the chart."""
    out = []
    for i in range(5):
        t = t0 + (t1 - t0) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        label = esc(fmt_ts(int(t))[5:16])
        out.append(f'<text x="{x(t):.1f}" y="{y}" text-anchor="{anchor}">{label}</text>')
    return out


def _clip(label: str, chars: int) -> str:
    """A label cut to ``chars`` characters (an SVG text does not wrap; the whole label is in
    the element's title)."""
    return label if len(label) <= chars else label[: chars - 1] + "\u2026"


def line_chart(
    series: dict[str, Sequence[tuple[int, float]]],
    *,
    width: int = 900,
    height: int = 280,
    y_label: str = "",
) -> str:
    """Lines of (time ms, value) per name, shared axes, with a legend."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return '<p class="meta">no data</p>'
    left, right, top, bottom = 70, 20, 10, 30
    t0 = min(p[0] for p in pts)
    t1 = max(p[0] for p in pts)
    if t1 == t0:
        t1 = t0 + 60_000
    ticks = nice_ticks(max(p[1] for p in pts))
    ymax = ticks[-1]
    pw, ph = width - left - right, height - top - bottom

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    def y(v: float) -> float:
        return top + ph - v / ymax * ph

    out = [_svg_open(width, height, 'role="img" class="chart"')]
    for v in ticks:
        yy = y(v)
        label = _tick_label(v, ticks[1] - ticks[0])
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{label}</text>')
    out += _time_labels(t0, t1, x, height - 8)
    out.append(
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="#999"/>'
        f'<line x1="{left}" x2="{width - right}" y1="{top + ph}" y2="{top + ph}" stroke="#999"/>'
    )
    if y_label:
        out.append(
            f'<text transform="translate(12,{top + ph / 2}) rotate(-90)" text-anchor="middle">{esc(y_label)}</text>'  # noqa: E501
        )
    legend = []
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        s = sorted(s)
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s)
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{path}">'
            f"<title>{esc(name)}</title></polyline>"
        )
        if len(s) == 1:
            out.append(
                f'<circle cx="{x(s[0][0]):.1f}" cy="{y(s[0][1]):.1f}" r="3" fill="{color}"/>'
            )
        legend.append(f'<span><i style="background:{color}"></i>{esc(name)}</span>')
    out.append("</svg>")
    return "".join(out) + f'<div class="legend">{"".join(legend)}</div>'


def bar_chart(items: Sequence[tuple[str, float, str]], *, width: int = 900) -> str:
    """Horizontal bars: (label, value, color)."""
    if not items:
        return '<p class="meta">no lag</p>'
    row = 18
    label_w = 330
    height = row * len(items) + 10
    vmax = max(v for _, v, _ in items) or 1
    out = [_svg_open(width, height)]
    for i, (label, v, color) in enumerate(items):
        yy = 5 + i * row
        w = (width - label_w - 90) * v / vmax
        out.append(
            f'<text x="{label_w - 6}" y="{yy + 12}" text-anchor="end">{esc(_clip(label, 52))}'
            f"<title>{esc(label)}</title></text>"
            f'<rect x="{label_w}" y="{yy + 2}" width="{max(w, 1):.1f}" height="{row - 5}" fill="{color}">'  # noqa: E501
            f"<title>{esc(label)}: {fmt_num(v)}</title></rect>"
            f'<text x="{label_w + w + 4:.1f}" y="{yy + 12}">{fmt_num(v)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def timeline(events: dict[str, Sequence[tuple[int, int, str]]], *, width: int = 900) -> str:
    """Per group a row of markers at (time, members, event) - rebalances and deletions."""
    pts = [e for s in events.values() for e in s]
    if not pts:
        return '<p class="meta">no group metadata records</p>'
    label_w, right, row = 200, 20, 24
    t0 = min(p[0] for p in pts)
    t1 = max(p[0] for p in pts)
    if t1 == t0:
        t1 = t0 + 60_000
    height = row * len(events) + 30
    pw = width - label_w - right

    def x(t: float) -> float:
        return label_w + (t - t0) / (t1 - t0) * pw

    out = [_svg_open(width, height)]
    for i, (group, evs) in enumerate(events.items()):
        yy = 10 + i * row + row / 2
        out.append(
            f'<text x="{label_w - 8}" y="{yy + 4}" text-anchor="end">{esc(_clip(group, 30))}'
            f"<title>{esc(group)}</title></text>"
            f'<line x1="{label_w}" x2="{width - right}" y1="{yy}" y2="{yy}" stroke="#eee"/>'
        )
        for t, members, kind in evs:
            color = "#c62828" if kind == "deleted" else "#1f77b4"
            r = 3 + min(members, 12) * 0.5
            out.append(
                f'<circle cx="{x(t):.1f}" cy="{yy}" r="{r:.1f}" fill="{color}" fill-opacity="0.7">'
                f"<title>{esc(group)} {esc(kind)} at {esc(fmt_ts(t))}: {members} members</title></circle>"  # noqa: E501
            )
    out += _time_labels(t0, t1, x, height - 6)
    out.append("</svg>")
    return "".join(out)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    left: Sequence[int] = (),
    wrap: Sequence[int] = (),
) -> str:
    """A table in a box that scrolls sideways when the window is narrower than the table, so
    the page itself never does. Columns in ``left`` are left-aligned; those in ``wrap`` (names,
    ids) are too, and wrap anywhere instead of widening the table."""

    def cls(i: int) -> str:
        return "w" if i in wrap else "l" if i in left else ""

    th = "".join(f'<th class="{cls(i)}">{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r in rows:
        body.append(
            "<tr>" + "".join(f'<td class="{cls(i)}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
        )
    return (
        f'<div class="scroll"><table><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def render(
    *,
    title: str,
    meta: dict[str, str],
    groups: list[dict],
    partitions: list[dict],
    lag_series: dict[str, list[tuple[int, float]]],
    rebalance_events: dict[str, list[tuple[int, int, str]]],
    warnings: list[str],
    max_partition_rows: int = 500,
    open_transactions: Sequence[dict] = (),
    share_groups: Sequence[dict] = (),
    share_partitions: Sequence[dict] = (),
) -> str:
    parts = [
        *head(title, meta, groups),
        *warnings_box(warnings),
        "<h2>Groups</h2>",
        groups_table(groups),
        *open_transactions_section(open_transactions),
        "<h2>Lag over time</h2>",
        line_chart(lag_series, y_label="messages behind"),
        "<h2>Top lagging partitions</h2>",
        top_lagging_chart(partitions),
        "<h2>Rebalance timeline</h2>",
        timeline(rebalance_events),
        "<h2>Partitions</h2>",
        *partitions_section(partitions, max_partition_rows),
        *share_section(share_groups, share_partitions, max_partition_rows),
        "</body></html>",
    ]
    return "\n".join(parts)


def head(title: str, meta: dict[str, str], groups: list[dict]) -> list[str]:
    """The document head, the title, the report's settings and the count cards."""
    total_lag = sum(g.get("total_lag") or 0 for g in groups)
    counts: dict[str, int] = {}
    for g in groups:
        counts[g.get("status") or "OK"] = counts.get(g.get("status") or "OK", 0) + 1
    cards = [("groups", fmt_num(len(groups))), ("total lag", fmt_num(total_lag))]
    cards += [(k, fmt_num(v)) for k, v in sorted(counts.items())]
    return [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        '<div class="meta">'
        + " &middot; ".join(f"{esc(k)}: {esc(v)}" for k, v in meta.items())
        + "</div>",
        '<div class="cards">'
        + "".join(f'<div class="card">{esc(k)}<b>{v}</b></div>' for k, v in cards)
        + "</div>",
    ]


def open_transactions_section(rows: Sequence[dict]) -> list[str]:
    """Offsets committed in transactions that have not ended: the group's committed offsets
    stay behind them until the transaction commits or aborts."""
    if not rows:
        return []
    body = [
        [
            esc(r["group"]),
            esc(f"{r['topic']}-{r['partition']}"),
            fmt_num(r["pending_offset"]),
            str(r["producer_id"]),
            fmt_ts(r["open_since"]),
        ]
        for r in rows
    ]
    return [
        "<h2>Open transactions</h2>",
        table(["group", "partition", "pending offset", "producer", "open since"], body, [0, 1]),
    ]


def share_section(groups: Sequence[dict], partitions: Sequence[dict], max_rows: int) -> list[str]:
    """Share groups (KIP-932): each group's totals, then its share-partitions (the
    ``max_rows`` with the most lag) from ``__share_group_state``."""
    if not groups:
        return []
    totals = table(
        [
            "share group",
            "state",
            "epoch",
            "members",
            "partitions",
            "in flight",
            "acknowledged",
            "archived",
            "redeliveries",
            "lag",
            "clients",
        ],
        [
            [
                esc(g["group"]),
                esc(g["state"]),
                fmt_num(g.get("epoch")),
                fmt_num(g["members"]),
                fmt_num(g["partitions"]),
                fmt_num(g["in_flight"]),
                fmt_num(g["acknowledged"]),
                fmt_num(g["archived"]),
                fmt_num(g["redeliveries"]),
                fmt_num(g.get("lag")),
                esc(", ".join(g.get("clients") or []) or "-"),
            ]
            for g in groups
        ],
        left=(1,),
        wrap=(0, 10),
    )
    shown = sorted(
        partitions, key=lambda p: (-(p.get("lag") or 0), p["group"], p["topic"], p["partition"])
    )[:max_rows]
    note = []
    if len(partitions) > len(shown):
        note.append(
            f'<p class="meta">the {len(shown)} with the most lag of {len(partitions)}'
            " share-partitions; all are in share_partitions.parquet</p>"
        )
    rows = table(
        [
            "share group",
            "topic",
            "partition",
            "start offset",
            "end offset",
            "log end",
            "in flight",
            "available",
            "acknowledged",
            "archived",
            "redeliveries",
            "lag",
        ],
        [
            [
                esc(p["group"]),
                esc(p["topic"]),
                fmt_num(p["partition"]),
                fmt_num(p["start_offset"]),
                fmt_num(p["end_offset"]),
                fmt_num(p.get("log_end_offset")),
                fmt_num(p["in_flight"]),
                fmt_num(p["available"]),
                fmt_num(p["acknowledged"]),
                fmt_num(p["archived"]),
                fmt_num(p["redeliveries"]),
                fmt_num(p.get("lag")),
            ]
            for p in shown
        ],
        left=(1,),
        wrap=(0,),
    )
    return ["<h2>Share groups</h2>", totals, *note, rows]


def warnings_box(warnings: list[str]) -> list[str]:
    if not warnings:
        return []
    return [
        '<div class="warn"><b>Skipped data</b><br>'
        + "<br>".join(esc(w) for w in warnings)
        + "</div>"
    ]


def groups_table(groups: list[dict]) -> str:
    return table(
        [
            "group",
            "status",
            "worst partition",
            "state",
            "members",
            "partitions",
            "not committed",
            "total lag",
            "max time lag",
            "lag trend /s",
            "catch-up",
            "last commit",
            "rebalances",
            "rebalances per hour",
            "below log start",
            "near expiry",
        ],
        [
            [
                esc(g["group"]),
                badge(g.get("status")),
                badge(g.get("worst_partition_status")),
                esc(g.get("state") or "-"),
                fmt_num(g.get("members")),
                fmt_num(g.get("partitions")),
                fmt_num(g.get("uncommitted_partitions")),
                fmt_num(g.get("total_lag")),
                fmt_duration(g.get("max_time_lag_ms")),
                fmt_num(g.get("lag_slope_per_s"), 2),
                fmt_duration(None if g.get("catch_up_s") is None else g["catch_up_s"] * 1000),
                fmt_duration(g.get("last_commit_age_ms")) + " ago"
                if g.get("last_commit_age_ms") is not None
                else "-",
                fmt_num(g.get("rebalances")),
                fmt_num(g.get("rebalances_per_hour"), 1),
                fmt_num(g.get("partitions_below_log_start")),
                fmt_num(g.get("partitions_near_expiry")),
            ]
            for g in groups
        ],
        left=(3,),
        wrap=(0,),
    )


def top_lagging_chart(partitions: list[dict]) -> str:
    """Bars of the 25 committed partitions with the most lag."""
    top = sorted(
        (p for p in partitions if p.get("committed") and (p.get("lag") or 0) > 0),
        key=lambda p: -(p.get("lag") or 0),
    )[:25]
    return bar_chart(
        [
            (
                f"{p['group']} {p['topic']}-{p['partition']}",
                float(p["lag"]),
                STATUS_COLORS.get(p.get("status") or "OK", "#555"),
            )
            for p in top
        ]
    )


def partitions_section(partitions: list[dict], max_rows: int) -> list[str]:
    """The ``max_rows`` worst partitions (by status, then lag), and a note if that is not
    all of them."""
    shown = sorted(
        partitions,
        key=lambda p: (
            -(p.get("status_code") or 0),
            -(p.get("lag") or 0),
            p["group"],
            p["topic"],
            p["partition"],
        ),
    )[:max_rows]
    note = []
    if len(partitions) > len(shown):
        note.append(
            f'<p class="meta">the {len(shown)} worst of {len(partitions)} partitions; all are in partition_lag.parquet</p>'  # noqa: E501
        )
    return [*note, partitions_table(shown)]


def partitions_table(shown: list[dict]) -> str:
    return table(
        [
            "group",
            "topic",
            "partition",
            "status",
            "committed",
            "log start",
            "log end",
            "lag",
            "time lag",
            "last commit",
            "consume/s",
            "produce/s",
            "catch-up",
            "consumer",
            "host",
        ],
        [
            [
                esc(p["group"]),
                esc(p["topic"]),
                fmt_num(p["partition"]),
                badge(p.get("status")),
                fmt_num(p.get("committed_offset")),
                fmt_num(p.get("log_start_offset")),
                fmt_num(p.get("log_end_offset")),
                fmt_num(p.get("lag")),
                fmt_duration(p.get("time_lag_ms")),
                esc(fmt_ts(p.get("last_commit_ts"))),
                fmt_num(p.get("consume_rate"), 1),
                fmt_num(p.get("produce_rate"), 1),
                fmt_duration(None if p.get("catch_up_s") is None else p["catch_up_s"] * 1000),
                esc(p.get("consumer_id") or "-"),
                esc(p.get("host") or "-"),
            ]
            for p in shown
        ],
        left=(1, 14),
        wrap=(0, 13),
    )
