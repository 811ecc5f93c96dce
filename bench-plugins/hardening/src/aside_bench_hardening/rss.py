"""VmRSS and open descriptors of the gateway's workers, every RSS_INTERVAL_S beside
the slow heads, in a thread of their own."""

from __future__ import annotations

import threading
import time

from aside_bench.stack import procs

from aside_bench_hardening.checks import RssSample

RSS_INTERVAL_S = 0.1


class RssSampler:
    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[RssSample] = []
        self.fds: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            now = time.time()
            rss = {pid: procs.rss_kib(pid) for pid in self.pids}
            fds = {pid: procs.fd_count(pid) for pid in self.pids}
            self.samples.append((now, {p: v for p, v in rss.items() if v is not None}))
            self.fds.append((now, {p: v for p, v in fds.items() if v is not None}))
            if self._stop.wait(RSS_INTERVAL_S):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_fds(self) -> dict[str, int]:
        return {str(pid): max((s[1].get(pid, 0) for s in self.fds), default=0) for pid in self.pids}
