"""GPU smoke run of the peers (sdk/peers): available? correct against the reference and the gate? how fast, roughly?

For a few small official workloads per definition, draws the gate's inputs (sdk.inputs.make_inputs), runs each
available peer (first call = JIT compile, reported separately), checks it with the gate's comparison
(sdk.gate.compare.check at the contest tolerance; the indexer by validity + sorted rescored values), and times it
with CUDA events (median of warm calls, eager; also replayed in a CUDA graph when the peer says it is served that
way). One line per (peer, workload) on stdout, everything in $OUT/peers_smoke.json. Timings are warm-L2 and rough:
the benchmark proper is the place for real numbers.

A missing or failing peer is a row, never a crash: the peers run in a child process, and when an extension kills it
(segfault, sticky CUDA error, a compile past the budget) the parent records that peer as crashed and starts a new
child for the peers after it. Prebuilt kernels run first, long first-call compiles last (Peer.jit_weight).

On the device, from the repository root (wheels in .whl/, see sdk/peers/__init__.py):
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH && PYTHONUNBUFFERED=1 python3 tools/peers_smoke.py
Options: --budget-s S (default 200: no new row starts after it; a running compile gets --grace-s (45) more before it is
killed), --only SUBSTRING (peer names), --workloads DEF=UUIDPREFIX[,UUIDPREFIX] (repeatable), --iters N.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Small but realistic official workloads (uuid prefixes): decode-sized rows, one larger MoE batch.
DEFAULT_WORKLOADS = {
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": ["30cecff1", "5f7e6f22", "f7f61b05"],
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": ["0c23b10c", "385742b2"],
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": ["b8f4f012", "1a4c6ba1"],
}


def short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def cuda_time_us(fn, iters: int) -> float:
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


def graph_time_us(fn, iters: int) -> tuple[float | None, str, object]:
    """Capture fn in a CUDA graph and time replays; (us, error, captured outputs)."""
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
        return cuda_time_us(graph.replay, iters), "", outs
    except Exception as exc:  # noqa: BLE001
        return None, short(exc), None


def versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("torch", "triton", "sgl-deep-gemm", "apache-tvm-ffi", "sgl-flash-mla", "sglang-kernel",
                 "flashinfer-python", "flashinfer-bench", "pydantic"):
        try:
            out[dist] = metadata.version(dist)
        except Exception:  # noqa: BLE001
            out[dist] = None
    return out


def run_peer_on(peer, definition, workload, inputs, refs, iters: int) -> dict:
    import torch
    from sdk.gate.compare import check, contest_tolerance

    row: dict = {}
    t0 = time.perf_counter()
    fn = peer.prepare(inputs)
    torch.cuda.synchronize()
    row["prepare_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    outs = fn()
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.perf_counter() - t0, 3)
    outs = tuple(outs)
    names = list(definition.outputs)
    verdict = check(definition.name, names, outs, refs, contest_tolerance(definition.name), inputs)
    row.update(status=verdict.status, passed=verdict.passed, reason=verdict.reason,
               max_abs=verdict.max_abs, max_rel=verdict.max_rel,
               matched_ratio=verdict.extra.get("matched_ratio"))
    row["eager_us"] = round(cuda_time_us(fn, iters), 2)
    if peer.uses_cuda_graph:
        us, err, gouts = graph_time_us(fn, iters)
        row["graph_us"] = None if us is None else round(us, 2)
        if err:
            row["graph_error"] = err
        elif gouts is not None:
            row["graph_matches_eager"] = all(torch.equal(a, b) for a, b in zip(tuple(gouts), outs))
    return row


def print_row(row: dict) -> None:
    if not row.get("available", True):
        print(f"{row['peer']:52s} unavailable: {row['reason']}")
        return
    graph = f" graph {row['graph_us']}us" if row.get("graph_us") is not None else ""
    graph += f" (graph failed: {row['graph_error']})" if row.get("graph_error") else ""
    print(f"{row['peer']:52s} {str(row.get('workload'))[:8]} {json.dumps(row.get('axes'))}: {row.get('status')} "
          f"max_abs={row.get('max_abs')} matched={row.get('matched_ratio')} eager {row.get('eager_us')}us{graph} "
          f"first call {row.get('first_call_s')}s {row.get('reason') or ''}".rstrip(), flush=True)


# ---- child: runs peers in order, one JSON line per event, exits on a CUDA error it cannot recover from ----------

def child(peer_names: list[str], chosen: dict, rows_file: Path, deadline: float, iters: int) -> int:
    import torch
    from sdk import definitions, inputs as inputs_mod, peers, workloads

    by_name = {p.name: p for p in peers.all_peers()}
    cases: dict = {}

    def emit(event: dict) -> None:
        with rows_file.open("a") as fh:
            fh.write(json.dumps(event, default=str) + "\n")

    def case_list(def_name: str) -> list:
        """(definition, workload, inputs, refs) per chosen workload, drawn once and shared by the peers."""
        if def_name not in cases:
            cases[def_name] = []
            try:
                definition = definitions.load(def_name)
                reference = definitions.reference(def_name)
                for workload in workloads.select(def_name, chosen[def_name]):
                    inputs = inputs_mod.make_inputs(definition, workload, seed=0, device="cuda")
                    value = reference(**inputs)
                    refs = value if isinstance(value, tuple) else (value,)
                    torch.cuda.synchronize()
                    cases[def_name].append((definition, workload, inputs, refs))
            except Exception as exc:  # noqa: BLE001
                emit({"error": f"{def_name}: inputs/reference failed: {short(exc)}"})
                print(f"{def_name}: inputs/reference failed: {short(exc)}", flush=True)
        return cases[def_name]

    for name in peer_names:
        peer = by_name[name]
        emit({"start": name})
        ok, why = peer.available()
        if not ok:
            row = {"definition": peer.definition, "peer": name, "available": False, "reason": why}
            emit({"row": row})
            print_row(row)
        else:
            for definition, workload, inputs, refs in case_list(peer.definition):
                row = {"definition": peer.definition, "workload": workload.uuid, "axes": dict(workload.axes),
                       "peer": name, "available": True, "uses_cuda_graph": peer.uses_cuda_graph, "note": peer.note}
                if time.time() > deadline:
                    row.update(status="SKIPPED", reason="time budget spent")
                else:
                    try:
                        row.update(run_peer_on(peer, definition, workload, inputs, refs, iters))
                    except Exception as exc:  # noqa: BLE001
                        row.update(status="RUNTIME_ERROR", passed=False, reason=short(exc),
                                   traceback=traceback.format_exc(limit=6))
                emit({"row": row})
                print_row(row)
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception as exc:  # noqa: BLE001 - a sticky CUDA error: this process is done
                    emit({"error": f"{name}: CUDA context unusable after this peer ({short(exc)})", "done": name})
                    return 3
        emit({"done": name})
    return 0


# ---- parent: orders the peers, (re)starts children, collects rows ----------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--grace-s", type=float, default=45.0)
    parser.add_argument("--only", default="")
    parser.add_argument("--workloads", action="append", default=[])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)  # JSON: {peers, chosen, rows, deadline}
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        return child(spec["peers"], spec["chosen"], Path(spec["rows"]), spec["deadline"], args.iters)

    deadline = time.time() + args.budget_s
    out_dir = Path(os.environ.get("OUT", "."))
    report: dict = {"versions": {}, "rows": [], "errors": []}

    def save():
        try:
            (out_dir / "peers_smoke.json").write_text(json.dumps(report, indent=1, default=str))
        except OSError as exc:
            print(f"could not write {out_dir}/peers_smoke.json: {exc}")

    try:
        import torch
        from sdk import peers

        report["versions"] = versions()
        report["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        print("versions:", report["versions"], "device:", report["device"], flush=True)
    except Exception as exc:  # noqa: BLE001
        report["errors"].append(f"setup: {short(exc)}")
        print(f"SETUP FAILED: {short(exc)} (the SDK needs flashinfer-bench + pydantic; see .whl/)")
        save()
        return 0

    chosen = dict(DEFAULT_WORKLOADS)
    for spec in args.workloads:
        name, _, keys = spec.partition("=")
        chosen[name] = [k for k in keys.split(",") if k]
    todo = [p for d in chosen for p in peers.peers_for(d) if args.only in p.name]
    todo = [p.name for p in sorted(todo, key=lambda p: p.jit_weight)]
    rows_file = out_dir / "peers_smoke.events.jsonl"
    rows_file.unlink(missing_ok=True)

    while todo:
        spec = json.dumps({"peers": todo, "chosen": chosen, "rows": str(rows_file), "deadline": deadline})
        cmd = [sys.executable, os.path.abspath(sys.argv[0]), "--child", spec, "--iters", str(args.iters)]
        started = len(rows_file.read_text().splitlines()) if rows_file.exists() else 0
        try:
            proc = subprocess.run(cmd, timeout=max(deadline - time.time(), 0) + args.grace_s, stderr=subprocess.PIPE,
                                  text=True)
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            rc, stderr = "timeout (budget + grace spent)", ""
        events = [json.loads(line) for line in rows_file.read_text().splitlines()[started:]] \
            if rows_file.exists() else []
        current = None
        for event in events:
            if "row" in event:
                report["rows"].append(event["row"])
            if "error" in event:
                report["errors"].append(event["error"])
            if "start" in event:
                current = event["start"]
                todo.remove(current)
            if "done" in event:
                current = None
        if rc != 0 and current is not None:
            tail = " | ".join(stderr.strip().splitlines()[-3:])[-400:]
            report["rows"].append({"peer": current, "available": None, "status": "CRASHED",
                                   "reason": f"child exited with {rc}: {tail}"})
            print(f"{current:52s} CRASHED (child exited with {rc}): {tail}", flush=True)
        elif rc != 0 and not events:
            report["errors"].append(f"child failed before any peer ({rc}): {stderr.strip()[-400:]}")
            print(f"child failed before any peer ({rc}): {stderr.strip()[-400:]}")
            break
        save()

    passed = sum(1 for r in report["rows"] if r.get("passed"))
    ran = sum(1 for r in report["rows"] if "status" in r)
    print(f"summary: {passed}/{ran} peer runs passed the gate; "
          f"{sum(1 for r in report['rows'] if r.get('available') is False)} unavailable peers; "
          f"{len(report['errors'])} errors; details in {out_dir / 'peers_smoke.json'}")
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
