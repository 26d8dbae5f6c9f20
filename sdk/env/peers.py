"""Prebuild (and optionally check) the peers on the GPU machine: `fib-sdk env prebuild [--check]`.

Prebuild: for each available peer, `prepare` and one call on a small official workload of its definition, which is
where DeepGEMM and FlashInfer JIT-compile their kernels (minutes on a fresh machine, cached under $FIB_SDK_CACHE /
$DG_JIT_CACHE_DIR for the bench that follows); the SDK's probe kernel is built the same way. With `--check`, every
peer is also run on a few workloads, compared with the gate's rule against the reference, and timed roughly (CUDA
events, warm L2; eager and, for capture-safe peers, in a CUDA graph): the bench proper is the place for real numbers.

A missing or failing peer is a row, never a crash: peers run in a child process, and when an extension kills it
(segfault, sticky CUDA error, a compile past the budget) the parent records that peer as CRASHED and starts a new
child for the peers after it. Prebuilt kernels go first, long JIT compiles last (`Peer.jit_weight`).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

PROBE = "fib-sdk.probe"  # the SDK's own JIT kernel, built like a peer

# Small but realistic official workloads (uuid prefixes): decode-sized rows, one larger MoE batch.
CHECK_WORKLOADS = {
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": ["30cecff1", "5f7e6f22", "f7f61b05"],
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": ["0c23b10c", "385742b2"],
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": ["b8f4f012", "1a4c6ba1"],
}


def short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def workloads_for(check: bool) -> dict[str, list[str]]:
    """Prebuild compiles on one workload per definition; a check covers them all."""
    return {d: keys if check else keys[:1] for d, keys in CHECK_WORKLOADS.items()}


# ---- timing helpers (rough, warm L2) -------------------------------------------------------------------------------

def events_us(fn, iters: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def graph_us(fn, iters: int) -> tuple[float | None, str, object]:
    """Capture fn in a CUDA graph and time replays: (us, error, captured outputs)."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # warm-up on the capture stream, as torch.cuda.graph recommends
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = fn()
        graph.replay()
        torch.cuda.synchronize()
        return events_us(graph.replay, iters), "", outs
    except Exception as exc:  # noqa: BLE001 - a peer that cannot be captured is a finding, not a crash
        return None, short(exc), None


# ---- child: runs peers in order, one JSON line per event ----------------------------------------------------------

def _peer_row(peer, definition, inputs, refs, check: bool, iters: int) -> dict:
    import torch

    row: dict = {}
    t0 = time.perf_counter()
    fn = peer.prepare(inputs)
    torch.cuda.synchronize()
    row["prepare_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    outs = tuple(fn())
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.perf_counter() - t0, 3)  # the JIT compile, when there is one
    row["status"] = "BUILT"
    if not check:
        return row
    from ..gate.compare import check as gate_check, contest_tolerance

    verdict = gate_check(definition.name, list(definition.outputs), outs, refs, contest_tolerance(definition.name),
                         inputs)
    row.update(status=verdict.status, passed=verdict.passed, reason=verdict.reason, max_abs=verdict.max_abs,
               max_rel=verdict.max_rel, matched_ratio=verdict.extra.get("matched_ratio"),
               eager_us=round(events_us(fn, iters), 2))
    if peer.uses_cuda_graph:
        us, err, gouts = graph_us(fn, iters)
        row["graph_us"] = None if us is None else round(us, 2)
        if err:
            row["graph_error"] = err
        elif gouts is not None:
            row["graph_matches_eager"] = all(torch.equal(a, b) for a, b in zip(tuple(gouts), outs))
    return row


def child(names: list[str], chosen: dict, events: Path, deadline: float, check: bool, iters: int) -> int:
    import torch

    from .. import definitions, inputs as inputs_mod, peers, workloads

    by_name = {p.name: p for p in peers.all_peers()}
    cases: dict = {}

    def emit(event: dict) -> None:
        with events.open("a") as fh:
            fh.write(json.dumps(event, default=str) + "\n")

    def case_list(name: str) -> list:
        if name not in cases:
            cases[name] = []
            try:
                definition = definitions.load(name)
                for workload in workloads.select(name, chosen[name]):
                    x = inputs_mod.make_inputs(definition, workload, seed=0, device="cuda")
                    refs = None
                    if check:
                        value = definitions.reference(name)(**x)
                        refs = value if isinstance(value, tuple) else (value,)
                    torch.cuda.synchronize()
                    cases[name].append((definition, workload, x, refs))
            except Exception as exc:  # noqa: BLE001
                emit({"error": f"{name}: inputs/reference failed: {short(exc)}"})
        return cases[name]

    for name in names:
        emit({"start": name})
        if name == PROBE:
            from ..bench import probe

            t0 = time.perf_counter()
            if not torch.cuda.is_available():
                emit({"row": {"peer": PROBE, "available": False, "reason": "no CUDA device"}, "done": name})
                continue
            try:
                probe.extension("cuda")
                row = {"peer": PROBE, "status": "BUILT", "first_call_s": round(time.perf_counter() - t0, 3)}
            except Exception as exc:  # noqa: BLE001
                row = {"peer": PROBE, "status": "COMPILE_ERROR", "reason": short(exc)}
            emit({"row": row})
            emit({"done": name})
            continue
        peer = by_name[name]
        ok, why = peer.available()
        if not ok:
            emit({"row": {"definition": peer.definition, "peer": name, "available": False, "reason": why}})
            emit({"done": name})
            continue
        for definition, workload, x, refs in case_list(peer.definition):
            row = {"definition": peer.definition, "workload": workload.uuid, "axes": dict(workload.axes),
                   "peer": name, "available": True, "uses_cuda_graph": peer.uses_cuda_graph}
            if time.time() > deadline:
                row.update(status="SKIPPED", reason="time budget spent")
            else:
                try:
                    row.update(_peer_row(peer, definition, x, refs, check, iters))
                except Exception as exc:  # noqa: BLE001
                    row.update(status="RUNTIME_ERROR", passed=False, reason=short(exc),
                               traceback=traceback.format_exc(limit=6))
            emit({"row": row})
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001 - a sticky CUDA error: this process is done
                emit({"error": f"{name}: CUDA context unusable after this peer ({short(exc)})", "done": name})
                return 3
        emit({"done": name})
    return 0


# ---- parent -------------------------------------------------------------------------------------------------------

def describe(row: dict) -> str:
    if row.get("available") is False:
        return f"{row['peer']:52s} unavailable: {row['reason']}"
    graph = f" graph {row['graph_us']}us" if row.get("graph_us") is not None else ""
    graph += f" (graph failed: {row['graph_error']})" if row.get("graph_error") else ""
    timing = f" eager {row['eager_us']}us{graph}" if "eager_us" in row else ""
    return (f"{row['peer']:52s} {str(row.get('workload') or '')[:8]:8s} {row.get('status')}{timing} "
            f"first call {row.get('first_call_s')}s {row.get('reason') or ''}").rstrip()


def run(*, only: str = "", check: bool = False, budget_s: float = 300.0, grace_s: float = 45.0, iters: int = 20,
        out_dir: Path | None = None, echo=print, names: list[str] | None = None,
        child_cores: set[int] | None = None, write_report: bool = True) -> dict:
    """Prebuild (and with `check`, gate and time) every peer (or the peers and PROBE in `names`); returns the
    report, also written as JSON to out_dir. `child_cores`: the CPUs the child process (and its compilers) may use."""
    from .. import peers

    deadline = time.time() + budget_s
    chosen = workloads_for(check)
    todo = [p for d in chosen for p in peers.peers_for(d) if only in p.name and (names is None or p.name in names)]
    queue = [p.name for p in sorted(todo, key=lambda p: p.jit_weight)]  # what the child still has to build
    if (only in PROBE) if names is None else (PROBE in names):
        queue.insert(0, PROBE)
    report: dict = {"mode": "check" if check else "prebuild", "rows": [], "errors": []}
    out_dir = Path(out_dir) if out_dir else None
    events = (out_dir or Path(".")) / f".fib-sdk-peers-{int(time.time())}.events.jsonl"
    events.parent.mkdir(parents=True, exist_ok=True)
    while queue:
        spec = json.dumps({"peers": queue, "chosen": chosen, "events": str(events), "deadline": deadline,
                           "check": check, "iters": iters})
        seen = len(events.read_text().splitlines()) if events.exists() else 0
        proc = subprocess.Popen([sys.executable, "-m", "sdk.env.peers", spec], stderr=subprocess.PIPE, text=True)
        if child_cores:  # set from here, not in a preexec_fn (unsafe when the caller runs threads, as the bench does)
            try:
                os.sched_setaffinity(proc.pid, child_cores)  # inherited by the compilers it starts
            except OSError:
                pass
        try:
            _, stderr = proc.communicate(timeout=max(deadline - time.time(), 0) + grace_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            rc, stderr = "timeout (budget + grace spent)", ""
        new = [json.loads(line) for line in events.read_text().splitlines()[seen:]] if events.exists() else []
        current = None
        for event in new:
            if "row" in event:
                report["rows"].append(event["row"])
                echo(describe(event["row"]))
            if "error" in event:
                report["errors"].append(event["error"])
                echo(event["error"])
            if "start" in event:
                current = event["start"]
                queue.remove(current)
            if "done" in event:
                current = None
        if rc != 0 and current is not None:
            tail = " | ".join(stderr.strip().splitlines()[-3:])[-400:]
            row = {"peer": current, "available": None, "status": "CRASHED", "reason": f"child exited with {rc}: {tail}"}
            report["rows"].append(row)
            echo(describe(row))
        elif rc != 0 and not new:
            report["errors"].append(f"child failed before any peer ({rc}): {stderr.strip()[-400:]}")
            echo(report["errors"][-1])
            break
    events.unlink(missing_ok=True)
    if out_dir and write_report:
        (out_dir / f"peers_{report['mode']}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    raise SystemExit(child(spec["peers"], spec["chosen"], Path(spec["events"]), spec["deadline"], spec["check"],
                           spec["iters"]))
