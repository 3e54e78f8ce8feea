"""The report's HTML page: its lag axis, and its layout in a real browser (Debian's chromium,
headless, through chromedriver) at the window sizes people use.

No Spark here: the page is rendered from rows shaped like the report's tables. Screenshots
are written to ``$KCOORD_SCREENSHOTS`` when it is set (to look at them), else to the test's
temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.html import line_chart, nice_ticks, render

T0 = 1_700_000_000_000
# Window sizes: full HD, the 1400-pixel window of the report that ran off the page, the
# common laptop sizes, a tablet, a phone.
SIZES = [(1920, 1080), (1400, 900), (1366, 768), (1280, 800), (1024, 768), (390, 844)]


def _axis_labels(svg: str) -> list[str]:
    """The y axis labels of a line chart (the right-aligned texts left of the plot)."""
    return re.findall(r'<text x="64" y="[^"]+" text-anchor="end">([^<]*)</text>', svg)


@pytest.mark.parametrize("top", [0.4, 1, 2, 3, 5, 7, 13, 99, 1234, 1e7])
def test_lag_axis_ticks_are_distinct_and_cover_the_data(top: float) -> None:
    svg = line_chart({"g": [(T0, 0.0), (T0 + 60_000, top)]})
    labels = _axis_labels(svg)
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert labels[0] == "0"
    values = [float(x.replace(",", "")) for x in labels]
    assert values == sorted(values) and values[-1] >= top
    assert len(labels) <= 6


def test_nice_ticks() -> None:
    assert nice_ticks(1) == [0, 1]
    assert nice_ticks(2) == [0, 1, 2]
    assert nice_ticks(7) == [0, 2, 4, 6, 8]
    assert nice_ticks(100) == [0, 25, 50, 75, 100]
    assert nice_ticks(0) == [0, 1]
    assert nice_ticks(0.5, integer=False) == pytest.approx([0, 0.2, 0.4, 0.6])


def page_rows() -> dict[str, Any]:
    """Rows like a busy cluster's: long group names, big numbers, every column filled."""
    groups = []
    partitions = []
    for i in range(12):
        name = f"payments-settlement-consumer-eu-west-{i}-{'x' * (i % 3) * 8}"
        groups.append(
            {
                "group": name,
                "status": ("OK", "WARN", "ERR")[i % 3],
                "worst_partition_status": ("OK", "WARN", "REWIND")[i % 3],
                "state": "PreparingRebalance" if i % 2 else "Stable",
                "members": 120 + i,
                "partitions": 1200 + i,
                "uncommitted_partitions": 12,
                "total_lag": 1_234_567_890 + i,
                "max_time_lag_ms": 86_400_000 * 3.5,
                "lag_slope_per_s": -12345.678,
                "catch_up_s": 123456.0,
                "last_commit_age_ms": 3_600_000 * 50,
                "rebalances": 12345,
                "rebalances_per_hour": 1020.0,
                "partitions_below_log_start": 1200,
                "partitions_near_expiry": 1200,
            }
        )
        for p in range(3):
            partitions.append(
                {
                    "group": name,
                    "topic": f"orders-v2-compacted-{p}",
                    "partition": p,
                    "status": "STOP",
                    "status_code": 4,
                    "committed": True,
                    "committed_offset": 9_876_543_210,
                    "log_start_offset": 1_000_000_000,
                    "log_end_offset": 11_111_111_100,
                    "lag": 1_234_567_890,
                    "time_lag_ms": 7_200_000,
                    "last_commit_ts": T0,
                    "consume_rate": 12345.6,
                    "produce_rate": 23456.7,
                    "catch_up_s": None,
                    "consumer_id": f"consumer-{name}-{p}-5f1c2b0e-1d2c-4c3b-9a8f-0123456789ab",
                    "host": "/10.120.33.147",
                }
            )
    # A small range: the lag chart's axis is 0-1.
    series = {g["group"]: [(T0 + m * 60_000, float(m % 2)) for m in range(30)] for g in groups[:3]}
    events = {g["group"]: [(T0 + k * 600_000, 3, "rebalance") for k in range(3)] for g in groups}
    return {
        "title": "kcoord consumer lag report",
        "meta": {"data": "/var/lib/kcoord/data", "report time": "2023-11-14 22:13:20 UTC"},
        "groups": groups,
        "partitions": partitions,
        "lag_series": series,
        "rebalance_events": events,
        "warnings": [],
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium")
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1"):  # fmt: skip
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _viewport(driver: Any, width: int, height: int) -> None:
    """The page's viewport exactly ``width`` x ``height`` CSS pixels."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def test_the_page_fits_the_window_at_common_sizes(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(**page_rows()))
    shots = Path(os.environ.get("KCOORD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    browser.get(page.as_uri())
    too_wide = {}
    for width, height in SIZES:
        _viewport(browser, width, height)
        got = browser.execute_script(
            "const t = document.querySelector('table');"
            "return {page: document.documentElement.scrollWidth,"
            " view: document.documentElement.clientWidth,"
            " table: Math.ceil(t.getBoundingClientRect().right),"
            " charts: Math.max(...[...document.querySelectorAll('svg')].map("
            "   s => Math.ceil(s.getBoundingClientRect().right)))};"
        )
        browser.save_screenshot(str(shots / f"report-{width}x{height}.png"))
        # Nothing runs off the page: the page never scrolls sideways and the charts end
        # inside the window; from 1366 pixels on the groups table fits whole (narrower, it
        # scrolls inside its own box).
        fits = [got["page"], got["charts"]] + ([got["table"]] if width >= 1366 else [])
        if max(fits) > got["view"]:
            too_wide[f"{width}x{height}"] = got
    assert not too_wide, too_wide


def test_every_groups_column_is_visible_at_1400_pixels(browser: Any, tmp_path: Path) -> None:
    """At 1400 pixels the groups table fits whole: its last column is on screen."""
    page = tmp_path / "report.html"
    page.write_text(render(**page_rows()))
    browser.get(page.as_uri())
    _viewport(browser, 1400, 900)
    right = browser.execute_script(
        "const c = document.querySelector('table thead th:last-child');"
        "return [c.getBoundingClientRect().right, document.documentElement.clientWidth];"
    )
    assert right[0] <= right[1], right
