"""A CPU-time sampling profiler for the benches: SIGPROF every ``interval`` seconds of this
process's CPU time (ITIMER_PROF counts user and system time, not time spent waiting for a
core), and the main thread's Python stack recorded at each. Unlike cProfile it adds no cost
per call (so it does not inflate small functions) and, unlike a wall-clock sampler, a shared
machine's load does not show up as cost.

    s = Sampler(); s.enable(); ...; s.disable(); print(s.report(30))
"""

from __future__ import annotations

import collections
import signal
from types import FrameType


def _name(f: FrameType) -> str:
    c = f.f_code
    path = c.co_filename
    for cut in ("/site-packages/", "/wt-31/", "/python3.11/"):
        if cut in path:
            path = path.split(cut, 1)[1]
            break
    return f"{path}:{c.co_name}"


class Sampler:
    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.samples = 0
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.own: collections.Counter[str] = collections.Counter()

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        self.samples += 1
        if frame is None:
            return
        self.own[_name(frame)] += 1
        seen = set()
        while frame is not None:
            name = _name(frame)
            if name not in seen:
                seen.add(name)
                self.inclusive[name] += 1
            frame = frame.f_back

    def enable(self) -> None:
        signal.signal(signal.SIGPROF, self._tick)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def disable(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)

    def report(self, top: int = 40) -> str:
        n = max(self.samples, 1)
        lines = [f"{self.samples} samples of {self.interval * 1e6:.0f} us CPU"]
        lines.append("  inclusive %   own %   function")
        for name, count in self.inclusive.most_common(top):
            lines.append(f"  {100 * count / n:10.1f} {100 * self.own[name] / n:7.1f}   {name}")
        lines.append("  most own time:")
        for name, count in self.own.most_common(top // 2):
            lines.append(
                f"  {100 * self.inclusive[name] / n:10.1f} {100 * count / n:7.1f}   {name}"
            )
        return "\n".join(lines)
