"""The process a solution runs in: builds it once, then evaluates workloads the parent sends over a pipe.

A crash, a hang or an exit here cannot take the parent down; the parent turns them into RUNTIME_ERROR or
TIMEOUT and starts a fresh worker for the next workload. stdout/stderr of each task go to a log file whose tail
travels back with the result (FlashInfer-Bench keeps the same log in its traces).
"""
from __future__ import annotations

import os
import sys
import tempfile
import traceback

MAX_LOG = 64 * 1024


class _Capture:
    """Redirect fd 1 and 2 (so compiler and CUDA output are caught too) into a temp file."""

    def __enter__(self):
        sys.stdout.flush(), sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(1), os.dup(2)
        os.dup2(self.file.fileno(), 1), os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(self.saved[0], 1), os.dup2(self.saved[1], 2)
        os.close(self.saved[0]), os.close(self.saved[1])
        self.file.seek(0, 2)
        size = self.file.tell()
        self.file.seek(max(0, size - MAX_LOG))
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def _no_core_dumps() -> None:
    """A crashing solution must not write a multi-GB core file into the working directory."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # not POSIX, or not permitted: nothing to protect
        pass


def main(conn, solution_json: str, definition_name: str, device: str) -> None:
    from .. import definitions, solutions
    from .._fib import Solution, Workload
    from . import guards
    from .compare import Tolerance
    from .evaluate import evaluate

    solution = Solution.model_validate_json(solution_json)
    definition = definitions.load(definition_name)
    guards.arm()  # before the solution is imported: what it replaces from here on is seen
    _no_core_dumps()
    conn.send("ready")  # the parent's per-workload timeout starts now, not during interpreter start-up
    fn = None
    while True:
        task = conn.recv()
        if task is None:
            return
        with _Capture() as cap:
            try:
                if fn is None:
                    try:
                        fn = solutions.build(solution, definition)
                    except Exception as exc:
                        traceback.print_exc()
                        result = {"status": "COMPILE_ERROR", "reason": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
                        fn = None
                if fn is not None:
                    workload = Workload.model_validate_json(task["workload"])
                    check, stats = evaluate(fn, solution, definition, workload, trials=task["trials"],
                                            seed=task["seed"], device=device, tol=Tolerance(**task["tol"]))
                    result = {"status": check.status, "reason": check.reason, "max_abs": check.max_abs,
                              "max_rel": check.max_rel, "extra": check.extra, "latency_ms": stats.latency_ms,
                              "reference_latency_ms": stats.reference_latency_ms}
                    if check.passed and task.get("timing"):
                        from ..bench.measure import measure

                        result["bench"] = measure(fn, solution, definition, workload, trials=task["trials"],
                                                  seed=task["seed"], device=device, tol=Tolerance(**task["tol"]),
                                                  **task["timing"])
                        if (rejected := result["bench"].get("rejected")):  # caught by the post-timing probe
                            result.update(status=rejected["status"], reason=f"timing: {rejected['reason']}")
            except Exception as exc:  # a defect in the harness or the reference, reported, not hidden
                traceback.print_exc()
                result = {"status": "RUNTIME_ERROR", "reason": f"harness: {type(exc).__name__}: {exc}"}
        result["log"] = cap.text
        conn.send(result)
