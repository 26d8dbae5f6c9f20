"""The peers' JIT builds of a bench run, prepared before any reference or peer is timed, beside the solutions' gate.

DeepGEMM, FlashInfer and Triton compile at a peer's first call: on a fresh machine that is minutes (190 s for the
indexer's peers on the H200), which inside the first workload's baseline timing spends a third of a 10-minute device
call before anything is timed. `PeerBuilds.start` runs the prebuild of `fib-sdk env prebuild` (sdk.env.peers: one
call per peer on a small workload, in a child process) for this run's peers while the bench gates and times the
solutions; `wait` joins it before the baselines, so every JIT cache is warm and no compile lands in a timed call.

Beside, not on top of: with enough CPUs the judge (and the solution workers it starts) keep RESERVED_CORES and the
builds' compilers get the rest, so host-bound calls are timed without a compiler on their cores; the builds' own
short GPU calls (one per peer) can still share the GPU with a timed call, which the median over a trial's calls
absorbs. With fewer CPUs the builds run first, alone. The report (per peer: status, seconds) goes into
`environment.peer_builds`.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Callable

RESERVED_CORES = 2  # the judge process and the solution worker it talks to
MIN_CORES_TO_OVERLAP = 6


def _cores() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: no affinity control, builds run alone
        return set()


class PeerBuilds:
    def __init__(self, names: list[str], budget_s: float, progress: Callable[[str], None] = print):
        self.names, self.budget_s, self.progress = list(names), budget_s, progress
        self.report: dict | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self._thread: threading.Thread | None = None
        self._saved_cores: set[int] = set()
        self.overlapped = False

    def _run(self, child_cores: set[int] | None) -> None:
        from ..env import peers as prebuild

        began = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="fib-sdk-peer-builds-") as tmp:
                self.report = prebuild.run(names=self.names, budget_s=self.budget_s, out_dir=tmp, write_report=False,
                                           child_cores=child_cores,
                                           echo=lambda line: self.progress(f"[peer builds] {line}"))
        except Exception as exc:  # noqa: BLE001 - a build that breaks is reported; the peer then fails in the bench
            self.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.progress(f"[peer builds] failed: {self.error}")
        self.seconds = time.perf_counter() - began

    def start(self) -> "PeerBuilds":
        if not self.names:
            return self
        cores = _cores()
        if len(cores) < MIN_CORES_TO_OVERLAP:
            self.progress(f"[peer builds] {len(self.names)} peer(s), before the solutions ({len(cores) or '?'} CPUs: "
                          "too few to build beside the gate)")
            self._run(None)
            return self
        reserved = set(sorted(cores)[:RESERVED_CORES])
        self._saved_cores, self.overlapped = cores, True
        os.sched_setaffinity(0, reserved)  # this process and the workers it starts from now on
        self.progress(f"[peer builds] {len(self.names)} peer(s) on CPUs {min(cores - reserved)}-{max(cores - reserved)}"
                      f" while the solutions are gated on CPUs {sorted(reserved)}")
        self._thread = threading.Thread(target=self._run, args=(cores - reserved,), daemon=True)
        self._thread.start()
        return self

    def wait(self) -> dict:
        """Join the builds (once), give this process its CPUs back, and return what environment.peer_builds holds."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._saved_cores:
            os.sched_setaffinity(0, self._saved_cores)
            self._saved_cores = set()
        rows = (self.report or {}).get("rows", [])
        return {"peers": self.names, "seconds": round(self.seconds, 1), "overlapped_with_gate": self.overlapped,
                "budget_s": self.budget_s, "error": self.error, "errors": (self.report or {}).get("errors", []),
                "rows": [{k: r.get(k) for k in ("peer", "status", "available", "first_call_s", "reason")
                          if r.get(k) is not None} for r in rows]}
