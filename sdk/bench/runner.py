"""`bench`: gate, then time, every solution on its definition's workloads, with peers and floors, in one run.

Only gate-PASSED (solution, workload) pairs are timed; the reference and the peers are timed in the same run on
the same inputs (with the first solution of each definition), so every speedup is a same-run ratio. With several
GPUs, each gets its own worker process and a share of the workloads.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Callable

from .. import workloads as wl
from .._fib import Workload
from ..gate import contest_tolerance, gate_solution
from ..solutions import REPO_ROOT, SolutionPackage
from . import floors, scoring
from .timing import CUPTI, EVENTS, WALL

SCHEMA = "fib-sdk.results/1"


def spread(items: list, n: int, cost: Callable[[object], float] | None = None) -> list[list]:
    """Longest-processing-time-first split of `items` over `n` workers; each share keeps the input order."""
    n = max(1, n)
    order = sorted(range(len(items)), key=lambda i: -(cost(items[i]) if cost else 1.0))
    loads, shares = [0.0] * n, [[] for _ in range(n)]
    for i in order:
        k = min(range(n), key=lambda j: (loads[j], j))
        loads[k] += cost(items[i]) if cost else 1.0
        shares[k].append(i)
    return [[items[i] for i in sorted(share)] for share in shares]


def workload_cost(workload: Workload) -> float:
    return float(max(1, *(v for v in workload.axes.values())))


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except Exception:
        return None


def environment(device: str, seed: int, method: str) -> dict:
    import torch

    env = {"gpu": None, "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__, "triton": None,
           "flashinfer_bench": None, "commit": os.environ.get("FIB_SDK_COMMIT") or _git("rev-parse", "HEAD"),
           "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")), "seed": seed,
           "timing_method": method, "python": None, "visible_gpus": 0}
    import platform

    env["python"] = platform.python_version()
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        pass
    try:
        from importlib.metadata import version

        env["flashinfer_bench"] = version("flashinfer-bench")
    except Exception:
        pass
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
        env["visible_gpus"] = torch.cuda.device_count()
        env["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        env["l2_bytes"] = torch.cuda.get_device_properties(0).L2_cache_size
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
        except Exception:
            pass
    return env


def results_path(env: dict, tag: str | None, out_dir: Path) -> Path:
    from ..errors import BadInputError
    from ..solutions import SAFE_NAME

    if tag is not None and not SAFE_NAME.match(tag):
        raise BadInputError(f"--tag {tag!r} must match {SAFE_NAME.pattern}")
    slug = re.sub(r"[^a-z0-9]+", "-", (env.get("gpu") or "cpu").lower()).strip("-")
    day = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    return out_dir / f"{slug}-{day}{'-' + tag if tag else ''}.json"


def _row(package: SolutionPackage, result, host_bench: dict | None, ceilings) -> dict:
    bench = result.raw.get("bench") or {}
    ref_bench = host_bench or bench
    work = bench.get("work") or ref_bench.get("work")
    row = {"definition": package.solution.definition, "solution": package.name,
           "solution_hash": package.solution.hash(), "workload": result.workload.uuid,
           "axes": dict(result.workload.axes), "status": result.status, "reason": result.reason,
           "latency_ms": bench.get("latency_ms"), "reference_latency_ms": ref_bench.get("reference_latency_ms"),
           "aa_noise_pct": bench.get("aa_noise_pct"), "timing_method": bench.get("timing_method"),
           "work": work, "floor_ms": None, "peers": ref_bench.get("peers", {}),
           "matched_ratio": (result.raw.get("extra") or {}).get("matched_ratio"),
           "max_abs_error": result.raw.get("max_abs")}
    if work and ceilings is not None:
        row["floor_ms"] = floors.floor_ms(floors.Work(**work), ceilings)
    if bench.get("declared_cache"):  # a declared cache is reported with its cold latency beside the warm one
        row.update(declared_cache=bench["declared_cache"], cold_latency_ms=bench.get("cold_latency_ms"))
    # Faster than the physical floor (bytes / bandwidth, FLOPs / peak) means something was skipped, not optimised.
    row["implausible"] = bool(row["floor_ms"] and row["latency_ms"] is not None and row["latency_ms"] < row["floor_ms"])
    return row


def flag_within_noise(rows: list[dict]) -> None:
    """Mark rows whose gap to the best peer is smaller than the run's A/A noise for that definition."""
    import statistics

    for definition in {r["definition"] for r in rows}:
        noise = [r["aa_noise_pct"] for r in rows if r["definition"] == definition and r.get("aa_noise_pct") is not None]
        level = statistics.median(noise) if noise else None
        for r in rows:
            if r["definition"] != definition:
                continue
            r["aa_noise_median_pct"] = level
            peers = [p["latency_ms"] for p in (r.get("peers") or {}).values() if p.get("latency_ms")]
            if level is None or not peers or not r.get("latency_ms"):
                r["within_noise_of_best_peer"] = None
            else:
                r["within_noise_of_best_peer"] = abs(r["latency_ms"] - min(peers)) / r["latency_ms"] * 100 < level


def _finite(value):
    """JSON has no inf/NaN: they become the strings "inf", "-inf", "nan" (as flashinfer-bench traces write them)."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def run_bench(packages: list[SolutionPackage], *, keys: list[str] | None = None, stride: int = 1, trials: int = 3,
              seed: int = 0, warmup: int = 10, iters: int = 50, method: str = "cupti", peers: bool = True,
              aa: bool = True, aa_every: int = 4, reference_iters: int = 10, peer_filter: list[str] | None = None,
              timeout_s: float = 300.0, compile_budget_s: float = 600.0, out_dir: Path | None = None,
              tag: str | None = None,
              trace_dir: Path | None = None, progress: Callable[[str], None] = print,
              workload_sets: dict[str, list[Workload]] | None = None) -> tuple[dict, Path | None]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = environment(device, seed, WALL if device == "cpu" else CUPTI if method == "cupti" else EVENTS)
    ceilings = None
    if device == "cuda":
        progress("measuring ceilings (HBM copy, bf16 and fp8 matmul) ...")
        ceilings = floors.measure_ceilings(device)
        env["ceilings"] = ceilings.as_dict()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if device == "cuda" else ["cpu"]
    by_def: dict[str, list[SolutionPackage]] = {}
    for package in packages:
        by_def.setdefault(package.solution.definition, []).append(package)
    rows: list[dict] = []
    env.update(warmup=warmup, iters=iters, trials=trials, reference_iters=reference_iters, aa_every=aa_every)
    for definition, group in by_def.items():
        if workload_sets and definition in workload_sets:
            chosen = list(workload_sets[definition])
        else:
            chosen = wl.select(definition, keys) if keys else list(wl.load(definition))[::max(1, stride)]
        peer_names = []
        if peers:
            from .. import peers as peer_mod

            peer_names = [p.name for p in peer_mod.peers_for(definition)
                          if not peer_filter or any(f in p.name for f in peer_filter)]
        host: dict[str, dict] = {}
        for index, package in enumerate(group):
            is_host = index == 0
            timing = {"warmup": warmup, "iters": iters, "method": method, "reference": is_host, "aa": aa,
                      "peers": peer_names if is_host else [], "reference_iters": reference_iters}
            trace_path = trace_dir / f"{package.name}.jsonl" if trace_dir else None
            results = []
            lock = threading.Lock()
            aa_set = {w.uuid for w in chosen[::max(1, aa_every)]} if aa else set()

            def drive(share, dev):
                done = gate_solution(package.solution, definition, share, trials=trials, seed=seed,
                                     tol=contest_tolerance(definition), timeout_s=timeout_s, device=dev,
                                     trace_path=trace_path, timing=timing, aa_uuids=aa_set,
                                     skip_after_timeout=True, first_call_extra_s=compile_budget_s,
                                     progress=lambda i, n, r: progress(
                                         f"[{package.name} {dev} {i}/{n}] {r.workload.uuid[:8]} {r.status}"
                                         + (f" {r.raw['bench']['latency_ms']:.4f} ms" if r.raw.get('bench') else "")
                                         + (f": {r.reason}" if r.reason else "")))
                with lock:
                    results.extend(done)

            shares = spread(chosen, len(devices), workload_cost)
            threads = [threading.Thread(target=drive, args=(share, dev)) for share, dev in zip(shares, devices) if share]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            order = {w.uuid: i for i, w in enumerate(chosen)}
            results.sort(key=lambda r: order[r.workload.uuid])
            for result in results:
                if is_host:
                    host[result.workload.uuid] = result.raw.get("bench") or {}
                rows.append(_row(package, result, None if is_host else host.get(result.workload.uuid), ceilings))
            results_doc, path = _save(env, rows, out_dir, tag, complete=False)  # a killed run keeps what it had
    return _save(env, rows, out_dir, tag, complete=True)


def _save(env: dict, rows: list[dict], out_dir: Path | None, tag: str | None, complete: bool):
    flag_within_noise(rows)
    env = {**env, "complete": complete}
    results = {"schema": SCHEMA, "environment": env, "rows": rows, "summary": scoring.summarize(rows)}
    path = None
    if out_dir is not None:
        path = results_path(env, tag, out_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_finite(results), indent=1, allow_nan=False, default=str) + "\n")
        os.replace(tmp, path)  # never a half-written results file
    return results, path
