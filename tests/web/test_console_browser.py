"""The console in a real browser (Debian's chromium driven by chromium-driver through
Selenium): the pages load, a group's lag rises while its consumer is stopped and falls when it
resumes, its status changes, the member list changes on a rebalance, and a user without
DESCRIBE on the group does not see it. The page is loaded once per phase and read as it updates
itself (the console polls its own fragment)."""

from __future__ import annotations

import base64
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.security.test_sasl import add_user
from tests.web.helpers import console_url

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)
selenium = pytest.importorskip("selenium", reason="needs selenium (the test extra)")

TOPIC, GROUP, HIDDEN_FROM_VIEWER = "web-topic", "web-live", "web-live"
OTHER_GROUP = "web-other"


def browser(tmp_path: Path, user: str, password: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM or ""
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / ('chromium-' + user)}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER or ""), options=opts)
    # Basic credentials on every request the page makes (its polling included).
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
    )
    return driver


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # the page swapped its content under us: read again
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def lag_of(driver: Any) -> int:
    return int(text_of(driver, "#total-lag").replace(",", ""))


class Producer:
    """Writes to the topic all along, so a stopped consumer falls behind."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            for _ in range(20):
                self.p.send(TOPIC, b"m%d" % i, partition=i % 2)
                i += 1
            self.p.flush()
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.p.close()


class Consumer:
    """A member of the group that polls and commits while ``running`` is set."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        from kafka import KafkaConsumer

        self.c = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            client_id=client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=300,
            session_timeout_ms=10000,
        )
        self.running = threading.Event()
        self.running.set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.is_set():
            if not self.running.is_set():
                time.sleep(0.05)
                continue
            if self.c.poll(200, max_records=500):
                self.c.commit()

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        self.c.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KcoordProcess]:
    k = start_kcoord(
        tmp_path / "data",
        "group.initial.rebalance.delay.ms=0",
        "kcoord.metrics.authentication=basic",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS;User:admin",
        "kcoord.lag.sample.interval.ms=300",
        "kcoord.lag.history.interval.ms=500",
        "kcoord.lag.min.distance.ms=0",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    yield k
    k.stop()


def test_console_follows_a_group_live(broker: KcoordProcess, tmp_path: Path) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )
    from selenium.webdriver.common.by import By

    base = console_url(broker)
    add_user(broker, "admin", "admin-secret")
    add_user(broker, "viewer", "viewer-secret")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        f.result(timeout=30)
    acls = [
        AclBinding(
            ResourceType.GROUP, OTHER_GROUP, ResourcePatternType.LITERAL, "User:viewer", "*",
            AclOperation.DESCRIBE, AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:viewer", "*",
            AclOperation.DESCRIBE, AclPermissionType.ALLOW,
        ),
    ]  # fmt: skip
    for f in admin.create_acls(acls).values():
        f.result(timeout=30)

    producer = Producer(broker.bootstrap)
    producer.thread.start()
    c1 = Consumer(broker.bootstrap, "web-consumer-1")
    c1.thread.start()
    from kafka import KafkaConsumer

    other = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=OTHER_GROUP, enable_auto_commit=False
    )
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    other.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(0, "", -1)})
    other.close()
    c2: Consumer | None = None
    driver = browser(tmp_path, "admin", "admin-secret")
    viewer = None
    try:
        # Every page loads.
        for page, marker in (
            ("/console/", "#nodes"),
            ("/console/groups", "#groups"),
            ("/console/topics", "#topics"),
            ("/console/share-groups", "#share-groups"),
            ("/console/transactions", "#transactions"),
            ("/console/cluster", "#cluster-nodes"),
        ):
            driver.get(base + page)
            assert driver.find_element(By.CSS_SELECTOR, marker), page
        driver.get(base + f"/console/groups/{GROUP}")
        wait_for("the group's partitions", lambda: "web-consumer-1" in text_of(driver, "#members"))
        wait_for(
            "two partitions",
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "tr.partition")) == 2,
        )
        # Keeping up: a small lag, and a status that is not an error.
        wait_for("the consumer keeping up", lambda: lag_of(driver) < 500)
        before = text_of(driver, "#group-status")
        assert before in ("OK", "WARN"), before

        # Stopped: the lag rises, on the page as it updates itself, and the status turns.
        c1.running.clear()
        first = wait_for("lag to rise", lambda: lag_of(driver) > 300 and lag_of(driver))
        wait_for("lag to keep rising", lambda: lag_of(driver) > first + 300)
        wait_for("the status to turn to ERR", lambda: text_of(driver, "#group-status") == "ERR")
        assert "STOP" in text_of(driver, "#partitions")
        peak = lag_of(driver)
        assert text_of(driver, "#max-time-lag") not in ("0.0 s", "…")

        # Resumed: the lag falls and the status recovers.
        c1.running.set()
        wait_for("lag to fall", lambda: lag_of(driver) < peak / 2)
        wait_for(
            "the status to recover", lambda: text_of(driver, "#group-status") in ("OK", "WARN")
        )
        # A second member: a rebalance, and the member list shows both.
        c2 = Consumer(broker.bootstrap, "web-consumer-2")
        c2.thread.start()
        wait_for(
            "two members after the rebalance",
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "#members tr.member")) == 2,
        )
        assert "web-consumer-2" in text_of(driver, "#members")
        wait_for("the rebalance in the timeline", lambda: "2" in text_of(driver, "#rebalances"))
        assert driver.find_element(By.CSS_SELECTOR, "#chart svg path.line")

        # A user without DESCRIBE on the group sees neither it nor its page.
        viewer = browser(tmp_path, "viewer", "viewer-secret")
        viewer.get(base + "/console/groups")
        rows = [
            e.get_attribute("data-group") for e in viewer.find_elements(By.CSS_SELECTOR, "tr.group")
        ]
        assert OTHER_GROUP in rows and HIDDEN_FROM_VIEWER not in rows, rows
        viewer.get(base + f"/console/groups/{GROUP}")
        assert "no group" in viewer.page_source
        assert GROUP not in viewer.find_element(By.TAG_NAME, "body").text.replace(
            f"no group '{GROUP}'", ""
        )
    finally:
        driver.quit()
        if viewer is not None:
            viewer.quit()
        if c2 is not None:
            c2.close()
        c1.close()
        producer.close()
