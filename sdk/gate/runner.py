"""Run the gate for one solution over many workloads, each solution in its own worker process.

Every (solution, workload) result becomes a flashinfer-bench Trace appended to a JSONL file as one whole line.
Timeouts cover build + all trials of a workload (FlashInfer-Bench's isolated runner counts compilation too).
"""
from __future__ import annotations

import datetime as _dt
import math
import multiprocessing as mp
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .. import jsonl
from .._fib import Correctness, Environment, Evaluation, Performance, Solution, Trace, Workload
from . import scan as scan_mod
from .compare import Tolerance

STARTUP_S = 300.0  # a worker's interpreter start and imports (not the solution's time): loaded machines are slow


@dataclass
class GateResult:
    workload: Workload
    status: str
    reason: str
    trace: Trace
    raw: dict

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


def environment(device: str) -> Environment:
    import torch

    libs = {"torch": torch.__version__}
    try:
        import triton

        libs["triton"] = triton.__version__
    except Exception:
        pass
    if torch.version.cuda:
        libs["cuda"] = torch.version.cuda
    hardware = torch.cuda.get_device_name() if device.startswith("cuda") else (platform.processor() or "cpu")
    return Environment(hardware=hardware, libs=libs)


def _finite(x: float) -> float:
    return x if isinstance(x, float) and math.isfinite(x) else float("nan") if x != x else float("inf")


def make_trace(solution: Solution, definition: str, workload: Workload, raw: dict, env: Environment) -> Trace:
    status = raw["status"]
    correctness = performance = None
    if status in ("PASSED", "INCORRECT_NUMERICAL") and "max_abs" in raw:
        extra = {k: v for k, v in (raw.get("extra") or {}).items()}
        correctness = Correctness(max_absolute_error=abs(_finite(float(raw["max_abs"]))),
                                  max_relative_error=abs(_finite(float(raw["max_rel"]))), extra=extra or None)
    elif status == "INCORRECT_NUMERICAL":
        correctness = Correctness(max_absolute_error=float("inf"), max_relative_error=float("inf"))
    if status == "PASSED":
        ours, ref = raw.get("latency_ms") or [0.0], raw.get("reference_latency_ms") or [0.0]
        lat, ref_lat = sorted(ours)[len(ours) // 2], sorted(ref)[len(ref) // 2]  # the gate's single timed calls
        if bench := raw.get("bench"):  # a real measurement replaces them when the bench ran
            lat, ref_lat = bench["latency_ms"], bench.get("reference_latency_ms") or 0.0
        performance = Performance(latency_ms=lat, reference_latency_ms=ref_lat,
                                  speedup_factor=ref_lat / lat if lat > 0 else 0.0)
    log = raw.get("log", "")
    if raw.get("reason"):
        log = f"{status}: {raw['reason']}\n{log}"
    evaluation = Evaluation(status=status, environment=env, log=log, correctness=correctness,
                            performance=performance, timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat())
    return Trace(definition=definition, workload=workload, solution=solution.name, evaluation=evaluation)


class _Worker:
    def __init__(self, solution: Solution, definition: str, device: str):
        from . import worker

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker.main, args=(child, solution.model_dump_json(), definition, device),
                                daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def ask(self, task: dict, timeout_s: float) -> dict:
        try:
            if not self.ready:  # the worker says "ready" once its imports are done; only then does timeout_s run
                if not self.conn.poll(STARTUP_S):
                    self.kill()
                    return {"status": "RUNTIME_ERROR", "reason": f"worker did not start within {STARTUP_S:g} s"}
                self.ready = self.conn.recv() == "ready"
            self.conn.send(task)
            if self.conn.poll(timeout_s):
                return self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.proc.join(5)
            return {"status": "RUNTIME_ERROR", "reason": f"worker died (exit code {self.proc.exitcode})"}
        if not self.proc.is_alive():
            return {"status": "RUNTIME_ERROR", "reason": f"worker died (exit code {self.proc.exitcode})"}
        self.kill()
        return {"status": "TIMEOUT", "reason": f"no result within {timeout_s:g} s"}

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(10)
        self.kill()


def gate_solution(solution: Solution, definition: str, workloads: Iterable[Workload], *, trials: int = 3,
                  seed: int = 0, tol: Tolerance = Tolerance(), timeout_s: float = 300.0, device: str | None = None,
                  trace_path: str | Path | None = None, timing: dict | None = None, aa_uuids: set | None = None,
                  progress: Callable[[int, int, GateResult], None] | None = None,
                  scan: bool = True, skip_after_timeout: bool = False,
                  first_call_extra_s: float = 0.0) -> list[GateResult]:
    """Gate `solution` on each workload in its own worker process. With `scan`, the static scan runs first and a
    solution with findings is neither built nor run: every workload gets RUNTIME_ERROR "static scan: ...".
    With `skip_after_timeout` the workloads after a TIMEOUT are recorded as TIMEOUT without running them.
    `first_call_extra_s` is added to the timeout of a fresh worker's first workload, where the solution is built
    and, when benching, the peers JIT-compile (FlashInfer-Bench counts the build in its 300 s; the default 0 keeps
    that)."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    env = environment(device)
    workloads = list(workloads)
    results: list[GateResult] = []
    worker: _Worker | None = None
    compile_failure: dict | None = None
    findings = scan_mod.scan(solution) if scan else []
    if findings:  # rejected before any build or device time; the log lists every finding
        compile_failure = {"status": "RUNTIME_ERROR", "reason": scan_mod.reason(findings),
                           "log": "\n".join(str(f) for f in findings)}
    try:
        for i, workload in enumerate(workloads):
            if compile_failure is not None:  # a failed build (or scan) fails again: no rebuild per workload
                raw = dict(compile_failure)
            else:
                fresh = worker is None
                worker = worker or _Worker(solution, definition, device)
                raw = worker.ask({"workload": workload.model_dump_json(), "trials": trials, "seed": seed,
                                  "tol": tol.__dict__,
                                  "timing": timing and {**timing, "aa": timing["aa"] and (aa_uuids is None
                                                                                         or workload.uuid in aa_uuids)}},
                                 timeout_s + (first_call_extra_s if fresh else 0.0))
                if raw["status"] == "COMPILE_ERROR":
                    compile_failure = raw
                elif raw["status"] == "TIMEOUT" and skip_after_timeout:
                    # like FlashInfer-Bench's persistent runner: a solution that hung once is not run again
                    compile_failure = {"status": "TIMEOUT", "reason": f"skipped: timed out on workload "
                                       f"{workload.uuid[:8]} ({raw.get('reason', '')})"}
                if raw["status"] in ("TIMEOUT", "RUNTIME_ERROR") and not worker.proc.is_alive():
                    worker = None  # a fresh process for the next workload
                elif raw["status"] == "RUNTIME_ERROR" and ("illegal memory access" in raw.get("reason", "")
                                                           or "CUDA error" in raw.get("reason", "")):
                    worker.kill()  # the CUDA context is unusable after an illegal access or other sticky error
                    worker = None
            trace = make_trace(solution, definition, workload, raw, env)
            if trace_path is not None:
                jsonl.append(trace_path, trace.model_dump_json())
            result = GateResult(workload, raw["status"], raw.get("reason", ""), trace, raw)
            results.append(result)
            if progress:
                progress(i + 1, len(workloads), result)
    finally:
        if worker is not None:
            worker.close()
    return results
