"""Charts as SVG, rendered on the server (no JavaScript library): the console's lag over
time."""

from __future__ import annotations

import time
from html import escape


def _fmt(v: float) -> str:
    if v >= 1e9:
        return f"{v / 1e9:.1f}G"
    if v >= 1e6:
        return f"{v / 1e6:.1f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}k"
    return f"{v:.0f}"


def line_chart(
    points: list[tuple[int, int]], width: int = 720, height: int = 180, title: str = ""
) -> str:
    """A line of (epoch ms, value) points with a value axis and the time span; an empty
    frame saying so without points."""
    pad_l, pad_r, pad_t, pad_b = 48, 8, 10, 22
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" class="frame"/>',
    ]
    if len(points) < 1:
        parts.append(
            f'<text x="{pad_l + w / 2}" y="{pad_t + h / 2}" text-anchor="middle" '
            'class="note">no samples yet</text></svg>'
        )
        return "".join(parts)
    t0, t1 = points[0][0], points[-1][0]
    top = max(max(v for _, v in points), 1)
    span = max(t1 - t0, 1)

    def x(t: int) -> float:
        return pad_l + (t - t0) / span * w if t1 > t0 else pad_l + w

    def y(v: int) -> float:
        return pad_t + h - v / top * h

    for frac in (0.0, 0.5, 1.0):
        yy = pad_t + h - frac * h
        parts.append(
            f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{pad_l - 4}" y="{yy + 4:.1f}" text-anchor="end" class="axis">'
            f"{_fmt(top * frac)}</text>"
        )
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}" for i, (t, v) in enumerate(points)
    )
    parts.append(f'<path d="{path}" class="line"/>')
    if len(points) == 1:
        parts.append(f'<circle cx="{x(t1):.1f}" cy="{y(points[0][1]):.1f}" r="3" class="dot"/>')
    left = time.strftime("%H:%M:%S", time.localtime(t0 / 1000))
    right = time.strftime("%H:%M:%S", time.localtime(t1 / 1000))
    parts.append(f'<text x="{pad_l}" y="{height - 6}" class="axis">{left}</text>')
    parts.append(
        f'<text x="{pad_l + w}" y="{height - 6}" text-anchor="end" class="axis">{right}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
