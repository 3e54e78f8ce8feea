"""A real broker (`broker.server.Broker`, the same object `kcoord serve` runs) in a thread of
the test process, with its own event loop: for tests that need to reach inside it (replace a
handler, look at its metrics) while blocking clients talk to it over loopback."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from broker.config import load_config
from broker.server import Broker

T = TypeVar("T")


class ThreadBroker:
    def __init__(self, data_dir: Path, *settings: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kcoord-test-broker")
        self._thread.start()
        cfg = load_config(env={}, overrides=["group.initial.rebalance.delay.ms=0", *settings])
        self.broker = Broker(("127.0.0.1", 0), None, data_dir, cfg)
        try:
            self.run(self.broker.start())
            assert self.broker.state is not None
            self.run(self.broker.state.groups.loaded.wait())
        except BaseException:
            self._stop_loop()
            raise
        self.host, self.port = "127.0.0.1", self.broker.port

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine in the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the broker's loop (its state is not thread-safe)."""

        async def inside() -> T:
            return fn()

        return self.run(inside())

    def close(self) -> None:
        try:
            self.run(self.broker.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
