"""Background tasks a runtime owns: held until done (the event loop keeps only weak
references to tasks), their failures logged, all cancelled on close."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self.tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s task failed", self._what, exc_info=task.exception())

    def cancel(self) -> list[asyncio.Task]:
        """Cancel every task; returns them (to await their end)."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        return tasks
