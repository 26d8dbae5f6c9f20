"""Gate one solution over many workloads: the judge here, the candidate in its own worker process.

Every (solution, workload) result becomes a flashinfer-bench Trace appended to a JSONL file as one whole line, with
the seed it ran with, the strict verdict and the number of checked calls. The timeout covers the build and all
calls of a workload (FlashInfer-Bench's isolated runner counts compilation too); the caller's work between trials
(`between_trials`, the bench's interleaved reference timing) does not count against it.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import secrets
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .. import definitions, jsonl
from .._fib import Correctness, Environment, Evaluation, Performance, Solution, Trace, Workload
from . import isolation
from . import scan as scan_mod
from .compare import Tolerance
from .judge import BetweenTrials, CallWork, WorkerFailure, judge
from .plan import CallPlan

STARTUP_S = 300.0  # a worker's interpreter start and imports (not the solution's time): loaded machines are slow


def draw_seed() -> int:
    """A run's seed when none is given: from the OS, so no default seed exists to precompute answers for."""
    return int.from_bytes(os.urandom(4), "little") >> 1


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

    @property
    def strict_passed(self) -> bool:
        return self.passed and bool((self.raw.get("strict") or {}).get("passed"))


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


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else 0.0


def make_trace(solution: Solution, definition: str, workload: Workload, raw: dict, env: Environment) -> Trace:
    status = raw["status"]
    correctness = performance = None
    extra = {**(raw.get("extra") or {}), "seed": raw.get("seed"), "checked_calls": raw.get("checked")}
    if raw.get("strict") is not None:
        extra["strict"] = raw["strict"]
    if status in ("PASSED", "INCORRECT_NUMERICAL") and "max_abs" in raw:
        correctness = Correctness(max_absolute_error=abs(_finite(float(raw["max_abs"]))),
                                  max_relative_error=abs(_finite(float(raw["max_rel"]))), extra=extra)
    elif status == "INCORRECT_NUMERICAL":
        correctness = Correctness(max_absolute_error=float("inf"), max_relative_error=float("inf"), extra=extra)
    if status == "PASSED":
        # The gate's own numbers: the worker's wall clock per call (device-synchronised), the judge's per reference.
        lat = _median([c["wall_ms"] for c in raw.get("calls", [])])
        ref = _median(raw.get("reference_ms") or [])
        performance = Performance(latency_ms=lat, reference_latency_ms=ref, speedup_factor=ref / lat if lat > 0 else 0.0)
    lines = [f"seed {raw.get('seed')}"]
    if raw.get("note"):
        lines.append(raw["note"])
    if raw.get("reason"):
        lines.insert(0, f"{status}: {raw['reason']}")
    log = "\n".join(lines) + "\n" + raw.get("log", "")
    evaluation = Evaluation(status=status, environment=env, log=log, correctness=correctness,
                            performance=performance, timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat())
    return Trace(definition=definition, workload=workload, solution=solution.name, evaluation=evaluation)


class Worker:
    """The candidate's process and the pipe to it; every request has a deadline."""

    def __init__(self, solution: Solution, definition: str, device: str):
        import torch.multiprocessing as tmp

        from . import worker

        ctx = tmp.get_context("spawn")
        # Non-dumpable from before the worker exists until it is gone (the worker drops CAP_SYS_PTRACE itself):
        # it cannot read or write this process's memory (isolation).
        self._protection = isolation.judge_protected()
        self._protection.__enter__()
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker.main, args=(child, solution.model_dump_json(), definition, device),
                                daemon=True)
        self.proc.start()
        child.close()
        self.pid = self.proc.pid
        self.ready = False
        self.unprotected: list[str] = []  # what the worker could not lock (isolation.drop_ptrace)
        self.deadline = math.inf
        self.limit_s = math.inf  # the time the current deadline allows, for the TIMEOUT reason

    def ask(self, msg: dict) -> dict:
        try:
            if not self.ready:  # imports first; only then does the workload's time run
                if not self.conn.poll(STARTUP_S):
                    self.kill()
                    raise WorkerFailure({"status": "RUNTIME_ERROR", "reason": f"worker did not start within "
                                         f"{STARTUP_S:g} s"})
                hello = self.conn.recv()
                self.ready, self.unprotected = bool(hello.get("ready")), list(hello.get("isolation") or [])
            # A nonce the reply must echo: code in the worker that writes a frame onto the pipe's descriptor itself
            # does not know it, and a real reply read late (after a forged one) carries the previous request's.
            nonce = secrets.randbits(63)
            self.conn.send({**msg, "nonce": nonce})
            if self.conn.poll(max(0.0, self.deadline - time.monotonic())):
                reply = self.conn.recv()
                if not isinstance(reply, dict) or reply.get("nonce") != nonce:
                    self.kill()
                    raise WorkerFailure({"status": "RUNTIME_ERROR", "reason": "a reply that the harness did not send "
                                         "(a frame written onto the pipe by the solution)"})
                if reply.get("status") and msg["op"] != "call":
                    raise WorkerFailure(reply)
                return reply
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.proc.join(5)
            raise WorkerFailure({"status": "RUNTIME_ERROR", "reason": f"worker died (exit code {self.proc.exitcode})"}) \
                from None
        if not self.proc.is_alive():
            raise WorkerFailure({"status": "RUNTIME_ERROR", "reason": f"worker died (exit code {self.proc.exitcode})"})
        self.kill()
        raise WorkerFailure({"status": "TIMEOUT", "reason": f"no result within {self.limit_s:g} s"})

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        self._kill_descendants()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        if self._protection is not None and not self.proc.is_alive():
            self._protection.__exit__(None, None, None)
            self._protection = None

    def _kill_descendants(self) -> None:
        """Every process the candidate started, while the worker (their subreaper) still holds them in its tree."""
        if self.proc.is_alive():
            for p in process_tree(self.pid)[1:]:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass

    def close(self) -> None:
        self._kill_descendants()
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(10)
        self.kill()


def _cpu_fallback_note(solution: Solution, device: str) -> str:
    native = [s.path for s in solution.sources if s.path.endswith((".cu", ".cuh"))]
    if native and not device.startswith("cuda"):
        return (f"gated on {device}: the solution's CPU fallback ran, not its CUDA kernel "
                f"({', '.join(native[:2])}{'...' if len(native) > 2 else ''})")
    return ""


def process_tree(pid: int) -> list[int]:
    """`pid` and every live descendant of it (Linux /proc; just `pid` elsewhere)."""
    try:
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    continue
    except OSError:
        return [pid]
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(parents.get(current, []))
    return tree


@contextmanager
def frozen(pid: int):
    """The candidate's process tree stopped (SIGSTOP) for the duration: while the caller's own work runs between
    trials (the bench times the references there), no thread of the candidate can run and launch GPU work or
    hold the CPU to slow it. Work the candidate left on the GPU cannot run either: every call ends synchronised."""
    stopped = []
    if hasattr(signal, "SIGSTOP"):
        for p in process_tree(pid):
            try:
                os.kill(p, signal.SIGSTOP)
                stopped.append(p)
            except OSError:
                pass
    try:
        yield
    finally:
        for p in reversed(stopped):
            try:
                os.kill(p, signal.SIGCONT)
            except OSError:
                pass


def _off_the_clock(between_trials: BetweenTrials, worker: Worker, spent: list[float]) -> BetweenTrials:
    """`between_trials` with the worker frozen and its time added to the worker's deadline (and to spent[0]): not
    the solution's time."""
    def call(trial: int, draw: Callable[[], dict]) -> dict[str, float]:
        started = time.monotonic()
        try:
            with frozen(worker.pid):
                return between_trials(trial, draw)
        finally:
            took = time.monotonic() - started
            worker.deadline += took
            spent[0] += took
    return call


def _work_off_the_clock(call_work: CallWork, worker: Worker) -> CallWork:
    """`call_work` with its time added to the worker's deadline: the caller's measure, not the solution's time."""
    def call(inputs: dict) -> dict:
        started = time.monotonic()
        try:
            return call_work(inputs)
        finally:
            worker.deadline += time.monotonic() - started
    return call


def _per_key(trials: list[dict[str, float]]) -> dict[str, list[float]]:
    """[{key: ms} per trial] -> {key: [ms per trial]}."""
    out: dict[str, list[float]] = {}
    for values in trials:
        for key, ms in values.items():
            out.setdefault(key, []).append(ms)
    return out


def gate_solution(solution: Solution, definition: str, workloads: Iterable[Workload], *, trials: int = 3,
                  seed: int | None = None, tol: Tolerance = Tolerance(), timeout_s: float = 300.0,
                  device: str | None = None, trace_path: str | Path | None = None, plan: CallPlan | None = None,
                  progress: Callable[[int, int, GateResult], None] | None = None, scan: bool = True,
                  skip_after_timeout: bool = False, first_call_extra_s: float = 0.0,
                  between_trials: BetweenTrials | None = None,
                  call_work: CallWork | None = None) -> list[GateResult]:
    """Gate `solution` on each workload. `plan` says how many calls per trial (default: `trials` single checked
    calls); `seed` None draws one from the OS (recorded in every trace). With `scan`, the static scan runs first and
    a solution with findings is neither built nor run. `first_call_extra_s` is added to a fresh worker's first
    workload, where the solution is built. `between_trials(trial, draw)` runs in this process after each trial of
    each workload (see `judge`); what it returns lands in raw["interleaved_ms"] as {key: [one value per trial]},
    its first failure in raw["interleaved_error"], its seconds in raw["interleaved_s"] (outside the timeout).
    `call_work(inputs)` measures each timed call's inputs (see `judge`): raw["calls"][i]["work"], its first failure
    in raw["call_work_error"], its time outside the timeout."""
    import torch

    from ..errors import BadInputError, UnavailableError

    if trials < 1:
        raise BadInputError(f"trials must be at least 1 (got {trials}): with none, nothing would be checked")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UnavailableError(f"device {device!r} asked for, but CUDA is not available here")
    if device == "cuda":  # one named device: the judge, the worker and the IPC handles must agree on it
        device = f"cuda:{torch.cuda.current_device()}"
    seed = draw_seed() if seed is None else seed
    plan = plan or CallPlan(trials=trials)
    env = environment(device)
    spec = definitions.load(definition)
    workloads = list(workloads)
    note = _cpu_fallback_note(solution, device)
    results: list[GateResult] = []
    worker: Worker | None = None
    has_setup = False
    sticky: dict | None = None  # a failed build (or scan) fails again: no rebuild per workload
    findings = scan_mod.scan(solution) if scan else []
    if findings:  # rejected before any build or device time; the log lists every finding
        sticky = {"status": "RUNTIME_ERROR", "reason": scan_mod.reason(findings),
                  "log": "\n".join(str(f) for f in findings)}
    try:
        for i, workload in enumerate(workloads):
            started = time.monotonic()
            if sticky is not None:
                raw = dict(sticky)
            else:
                fresh = worker is None
                if fresh:
                    worker = Worker(solution, definition, device)
                worker.deadline = math.inf
                try:
                    if fresh:
                        worker.limit_s = timeout_s + first_call_extra_s + STARTUP_S
                        worker.deadline = time.monotonic() + worker.limit_s
                        built = worker.ask({"op": "build"})
                        has_setup = bool(built.get("setup"))
                    worker.limit_s = timeout_s + (first_call_extra_s if fresh else 0.0)
                    worker.deadline = time.monotonic() + worker.limit_s
                    spent = [0.0]  # seconds in between_trials: the worker's deadline moves by as much
                    outcome = judge(worker.ask, worker.pid, solution, spec, workload, plan=plan, seed=seed, tol=tol,
                                    device=torch.device(device), has_setup=has_setup, fresh_worker=fresh,
                                    between_trials=None if between_trials is None else
                                    _off_the_clock(between_trials, worker, spent),
                                    call_work=None if call_work is None else _work_off_the_clock(call_work, worker))
                    raw = {"status": outcome.check.status, "reason": outcome.check.reason,
                           "max_abs": outcome.check.max_abs, "max_rel": outcome.check.max_rel,
                           "extra": outcome.check.extra, "calls": outcome.calls, "reference_ms": outcome.reference_ms,
                           "setup_ms": outcome.setup_ms, "checked": outcome.checked, "log": outcome.log,
                           "strict": {"passed": outcome.check.passed and outcome.strict[0],
                                      "reason": outcome.strict[1] if outcome.check.passed else
                                      f"contest status {outcome.check.status}"}}
                    if between_trials is not None:
                        raw.update(interleaved_ms=_per_key(outcome.interleaved), interleaved_s=round(spent[0], 3))
                        if outcome.interleaved_error is not None:
                            raw["interleaved_error"] = outcome.interleaved_error
                    if outcome.call_work_error is not None:
                        raw["call_work_error"] = outcome.call_work_error
                except WorkerFailure as failure:
                    raw = dict(failure.raw)
                if raw["status"] == "COMPILE_ERROR":
                    sticky = raw
                elif raw["status"] == "TIMEOUT" and skip_after_timeout:
                    # like FlashInfer-Bench's persistent runner: a solution that hung once is not run again
                    sticky = {"status": "TIMEOUT", "reason": f"skipped: timed out on workload {workload.uuid[:8]} "
                              f"({raw.get('reason', '')})"}
                if not worker.alive or raw["status"] == "TIMEOUT" or (
                        raw["status"] == "RUNTIME_ERROR" and any(s in raw.get("reason", "") for s in
                                                                 ("illegal memory access", "CUDA error"))):
                    worker.kill()  # a fresh process next: a hung or dead worker, or a CUDA context past saving
                    worker = None
            raw.update(seed=seed, gate_s=time.monotonic() - started, device=device, note=note)
            if worker is not None and worker.unprotected:  # the judge's memory was not fully locked away
                raw["isolation"] = worker.unprotected
            raw.setdefault("strict", {"passed": False, "reason": f"contest status {raw['status']}"})
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
