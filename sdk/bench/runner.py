"""`bench`: every solution on its definition's workloads, with the reference, peers and floors, in one run.

Per definition: first each solution through the gate with a timing plan, so every timed call is also a call the
judge may check (`sdk.gate.judge`), while the peers' JIT builds run beside it (`peer_builds`). On one device the
reference(s) are timed between each solution's trials, in the judge's process, on inputs from that solution's own
pool (`interleave`: solution trial 0, reference trial 0, solution trial 1, ...), so a row's speedup compares
timings taken side by side while the host-bound reference's time drifts with the CPU. Then the baselines (peers
and probe, and the references where they were not interleaved: `--reference-after`, several devices, or a row whose
interleaved timing is missing; in this process: `baselines`), timed with every JIT cache warm; latencies come from
the judge's raw per-call records (`stats`). A row that passed the checks but ran faster than its physical floor is
rejected, not reported. With several GPUs, each gets its own worker process and a share of the workloads.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Callable, Collection

from .. import workloads as wl
from .._fib import Workload
from .. import definitions
from ..gate import contest_tolerance, draw_seed, gate_solution
from ..solutions import REPO_ROOT, SolutionPackage
from . import floors, interleave, scoring, stats
from .baselines import HOST, time_baselines
from .peer_builds import PeerBuilds
from .config import BenchConfig
from .rows import SCHEMA, ResultRow
from .timing import CUPTI, WALL


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


SOURCE_DIRS = ("sdk", "solutions", "templates")
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".cpp", ".toml", ".j2", ".json"}


def sources_sha256(root: Path = REPO_ROOT) -> str:
    """One digest of the code that ran (sdk/, solutions/, templates/): the commit alone can mislead where a
    machine's copy of the checkout carries an older .git (seen on the device machine)."""
    import hashlib

    digest = hashlib.sha256()
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def environment(device: str, seed: int | None, method: str) -> dict:
    import torch

    env = {"gpu": None, "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__, "triton": None,
           "flashinfer_bench": None, "commit": os.environ.get("FIB_SDK_COMMIT") or _git("rev-parse", "HEAD"),
           "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")), "sources_sha256": sources_sha256(),
           "seed": seed,
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
        env["gpus"] = [{"device": f"cuda:{i}", "name": torch.cuda.get_device_properties(i).name,
                        "uuid": str(getattr(torch.cuda.get_device_properties(i), "uuid", "") or "")}
                       for i in range(env["visible_gpus"])]
        env["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        env["l2_bytes"] = torch.cuda.get_device_properties(0).L2_cache_size
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
        except Exception:
            pass
    return env


def _baselines_of_share(definition: str, share: list[Workload], device: str, *, seed: int, config: BenchConfig,
                        peer_names: list[str], references: Collection[str] | None = None) -> dict[str, dict]:
    spec, tol = definitions.load(definition), contest_tolerance(definition)
    return {w.uuid: time_baselines(spec, w, seed=seed, config=config, device=device, peer_names=peer_names, tol=tol,
                                   time_references=references is None or w.uuid in references)
            for w in share}


def time_all_baselines(definition: str, chosen: list[Workload], shares: list[list[Workload]], devices: list[str], *,
                       seed: int, config: BenchConfig, peer_names: list[str],
                       progress: Callable[[str], None] = print,
                       references: Collection[str] | None = None) -> dict[str, dict]:
    """Reference(s), peers and probe of every workload (every `baseline_every`-th; the rest get {}), each on the
    device of its share; `references`: the workload uuids whose references are timed here (None: all; the others
    were timed between the solutions' trials). One device: in this process. Several: one process per device,
    because the judge's CUPTI spans come from torch.profiler, one per process; the dataset choice reaches them
    through FIB_DATASET_PATH."""
    index = {w.uuid: i for i, w in enumerate(chosen)}
    timed = [[w for w in share if not index[w.uuid] % config.baseline_every] if config.reference or peer_names
             else [] for share in shares]
    out: dict[str, dict] = {w.uuid: {} for w in chosen}

    def report(done: dict[str, dict], device: str) -> None:
        out.update(done)
        for uuid, b in done.items():
            peers = ", ".join(f"{name.split('+')[0]} {p['latency_ms']:.4g}" if p.get("latency_ms") else
                              f"{name.split('+')[0]} {p.get('status')}" for name, p in (b.get("peers") or {}).items())
            ref = b.get("reference_latency_ms")
            progress(f"[baselines {device} {index[uuid] + 1}/{len(chosen)}] {uuid[:8]} reference "
                     + (f"{ref:.4g} ms" if ref else "interleaved" if references is not None and uuid not in references
                        else "-") + (f"; peers (ms): {peers}" if peers else "")
                     + f" [{b.get('baseline_s', 0):.1f} s]")

    jobs = [(share, dev) for share, dev in zip(timed, devices) if share]
    if len(jobs) <= 1:
        for share, dev in jobs:
            for w in share:  # one at a time, so progress shows as it goes
                report(_baselines_of_share(definition, [w], dev, seed=seed, config=config, peer_names=peer_names,
                                           references=references), dev)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=len(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_baselines_of_share, definition, share, dev, seed=seed, config=config,
                               peer_names=peer_names, references=None if references is None else set(references)): dev
                   for share, dev in jobs}
        for future, dev in futures.items():
            report(future.result(), dev)
    return out


def _run_shares(work: Callable, shares: list[list], devices: list[str]) -> None:
    """work(share, device) for every non-empty share, one thread per device; the first error is raised here."""
    errors: list[BaseException] = []

    def run(share, dev):
        try:
            work(share, dev)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(share, dev)) for share, dev in zip(shares, devices) if share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def results_path(env: dict, tag: str | None, out_dir: Path) -> Path:
    from ..errors import BadInputError
    from ..solutions import SAFE_NAME

    if tag is not None and not SAFE_NAME.match(tag):
        raise BadInputError(f"--tag {tag!r} must match {SAFE_NAME.pattern}")
    slug = re.sub(r"[^a-z0-9]+", "-", (env.get("gpu") or "cpu").lower()).strip("-")
    day = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    return out_dir / f"{slug}-{day}{'-' + tag if tag else ''}.json"


FLOOR_MARGIN = 0.85


def implausibly_fast(latency_ms: float | None, floor_ms: float | None) -> bool:
    """True when a latency is under FLOOR_MARGIN x the physical floor (see make_row)."""
    return bool(floor_ms) and latency_ms is not None and latency_ms < FLOOR_MARGIN * floor_ms


REFERENCE_FIELDS = ("reference_latency_ms", "reference_trials_ms", "reference_aa_pct", "reference_source",
                    "references_ms")


def row_reference(raw: dict, baseline: dict) -> dict:
    """The row's reference fields: from the references timed between this solution's trials where the gate result
    has them, else from the baselines timed after the solutions (`reference_timing` says which; None: neither)."""
    interleaved, error = interleave.from_raw(raw), raw.get("interleaved_error")
    if interleaved is not None:
        return {**interleaved, "reference_timing": interleave.INTERLEAVED, "reference_interleave_error": error}
    after = {key: baseline.get(key) for key in REFERENCE_FIELDS}
    return {**after, "reference_trials_ms": after["reference_trials_ms"] or [],
            "references_ms": after["references_ms"] or {}, "reference_interleave_error": error,
            "reference_timing": interleave.AFTER if after["reference_latency_ms"] is not None else None}


def make_row(package: SolutionPackage, result, baseline: dict, ceilings, gpu: bool) -> dict:
    raw = result.raw
    timed = stats.latency(raw.get("calls") or [], gpu) if result.passed else stats.latency([], gpu)
    extra = raw.get("extra") or {}
    strict = raw.get("strict") or {}
    row = ResultRow(
        definition=package.solution.definition, solution=package.name, solution_hash=package.solution.hash(),
        workload=result.workload.uuid, axes=dict(result.workload.axes), status=result.status, reason=result.reason,
        strict_passed=bool(strict.get("passed")), strict_reason=strict.get("reason", ""), seed=raw.get("seed"),
        latency_ms=timed["latency_ms"], latency_trials_ms=timed["latency_trials_ms"], e2e_ms=timed["e2e_ms"],
        host_ms=timed["host_ms"], idle_ms=timed["idle_ms"],
        timing_method=timed["timing_method"], timer_fallback=bool(gpu and timed["timing_method"] not in (None, CUPTI)),
        timed_calls=timed["timed_calls"], checked_calls=raw.get("checked"), setup_ms=raw.get("setup_ms") or [],
        gate_s=raw.get("gate_s"), aa_noise_pct=timed["aa_noise_pct"],
        **row_reference(raw, baseline), work=baseline.get("work"),
        probe_ms=baseline.get("probe_ms"), probe=baseline.get("probe") or {},
        peers=baseline.get("peers") or {}, matched_ratio=extra.get("matched_ratio"), max_abs_error=raw.get("max_abs"),
        rel_l2=max((v for k, v in extra.items() if k.endswith("rel_l2") and isinstance(v, float)), default=None),
    ).model_dump()
    if row["work"] and ceilings is not None:
        row["floor_ms"] = floors.floor_ms(floors.Work(**row["work"]), ceilings)
        timed_floor = floors.timed_call_floor(raw.get("calls") or [], row["work"]["matrix"], ceilings,
                                              "span_ms" if gpu else "wall_ms") if result.passed else None
        if timed_floor:  # the check below compares the timed calls' latency with the timed calls' own floor
            row.update(floor_draws_ms=row["floor_ms"], floor_basis="timed calls", **timed_floor)
        if row["probe_ms"]:
            from .probe import bound_ms, timed_call_bounds

            probed = floors.Work(**row["work"])
            row["bound_draws_ms"] = bound_ms(row["probe_ms"], probed, ceilings)
            per_call = timed_call_bounds(raw.get("calls") or [], row["probe_ms"], probed, ceilings,
                                         "span_ms" if gpu else "wall_ms") if result.passed else None
            row.update(per_call or {"bound_ms": row["bound_draws_ms"]},
                       bound_basis="timed calls" if per_call else "baseline draws")
    # Well under the floor (bytes / bandwidth, FLOPs / peak) means work was skipped, not optimised. "Well": the
    # bandwidth is a device copy's, and a read-mostly kernel streams faster than a copy (on the H200 a kernel read
    # 1.1 GB in 0.262 ms, 4.2 TB/s, 1.003x the copy rate of that run); FLOOR_MARGIN x floor is a rate above the
    # HBM's own peak (4.8 TB/s on the H200 vs a 4.2 TB/s copy), which no kernel reaches.
    if implausibly_fast(row["latency_ms"], row["floor_ms"]):
        row.update(status="RUNTIME_ERROR", implausible=True, strict_passed=False,
                   reason=f"timing: {row['latency_ms']:.4g} ms is under the physical floor {row['floor_ms']:.4g} ms "
                   "(work skipped or not seen by the timer)", latency_ms=None)
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


def _progress_line(package: SolutionPackage, dev: str, i: int, n: int, result) -> str:
    timed = stats.latency(result.raw.get("calls") or [], dev.startswith("cuda"))
    ref = (interleave.from_raw(result.raw) or {}).get("reference_latency_ms")
    return (f"[{package.name} {dev} {i}/{n}] {result.workload.uuid[:8]} {result.status}"
            + (f" {timed['latency_ms']:.4f} ms" if result.passed and timed["latency_ms"] else "")
            + (f" (reference {ref:.4g} ms, interleaved)" if ref else "")
            + (f" (interleaved reference failed: {result.raw['interleaved_error']})"
               if result.raw.get("interleaved_error") else "")
            + ("" if result.strict_passed or not result.passed else " (strict: FAIL)")
            + f" [{result.raw.get('gate_s', 0):.1f} s]" + (f": {result.reason}" if result.reason else ""))


def run_bench(packages: list[SolutionPackage], config: BenchConfig = BenchConfig(), *, out_dir: Path | None = None,
              tag: str | None = None, trace_dir: Path | None = None, progress: Callable[[str], None] = print,
              workload_sets: dict[str, list[Workload]] | None = None) -> tuple[dict, Path | None]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    seed = draw_seed() if config.seed is None else config.seed
    env = environment(device, seed, CUPTI if gpu else WALL)
    env.update(config=config.model_dump(), baselines=HOST,
               definitions=definitions.environment_definitions(sorted({p.solution.definition for p in packages})))
    ceilings = None
    if gpu:
        progress("measuring ceilings (HBM copy, bf16 and fp8 matmul) ...")
        ceilings = floors.measure_ceilings(device)
        env["ceilings"] = ceilings.as_dict()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if gpu else ["cpu"]
    interleaving, env["reference_timing"] = reference_timing(config, len(devices))
    timers: list[interleave.ReferenceTimer] = []
    by_def: dict[str, list[SolutionPackage]] = {}
    for package in packages:
        by_def.setdefault(package.solution.definition, []).append(package)
    rows: list[dict] = []
    plan = config.plan(device)
    chosen_by_def: dict[str, list[Workload]] = {}
    peers_by_def: dict[str, list[str]] = {}
    for definition in by_def:
        if workload_sets and definition in workload_sets:
            chosen_by_def[definition] = list(workload_sets[definition])
        else:
            chosen_by_def[definition] = (wl.select(definition, config.keys) if config.keys
                                         else list(wl.load(definition))[::config.stride])
        peers_by_def[definition] = []
        if config.peers:
            from .. import peers as peer_mod

            peers_by_def[definition] = [p.name for p in peer_mod.peers_for(definition)
                                        if not config.peer_filter or any(f in p.name for f in config.peer_filter)]
    build_names = [n for names in peers_by_def.values() for n in names]
    builds = None
    if gpu and (build_names or config.reference):
        from ..env.peers import PROBE

        builds = PeerBuilds(build_names + [PROBE], config.compile_budget_s, progress).start()
    try:
        for definition, group in by_def.items():
            chosen, peer_names = chosen_by_def[definition], peers_by_def[definition]
            tol = contest_tolerance(definition)
            # One share of the workloads per GPU, fixed for the definition: a workload's reference, peers and
            # probe are timed on the GPU that gates and times its solutions.
            shares = spread(chosen, len(devices), workload_cost)
            where = {w.uuid: dev for share, dev in zip(shares, devices) for w in share}
            gated: list[tuple[SolutionPackage, list]] = []
            for package in group:  # the solutions first: the peers' JIT builds run beside them
                trace_path = trace_dir / f"{package.name}.jsonl" if trace_dir else None
                results = []
                lock = threading.Lock()

                def drive(share, dev, package=package, trace_path=trace_path, results=results, lock=lock):
                    timer = interleave.ReferenceTimer(definition, dev, config) if interleaving else None
                    done = gate_solution(package.solution, definition, share, seed=seed, tol=tol,
                                         timeout_s=config.timeout_s, device=dev, trace_path=trace_path, plan=plan,
                                         skip_after_timeout=True, first_call_extra_s=config.compile_budget_s,
                                         progress=lambda i, n, r: progress(_progress_line(package, dev, i, n, r)),
                                         between_trials=timer, call_work=functools.partial(floors.call_work,
                                                                                            definition))
                    with lock:
                        results.extend(done)
                        timers.extend([timer] if timer is not None else [])

                _run_shares(drive, shares, devices)
                order = {w.uuid: i for i, w in enumerate(chosen)}
                results.sort(key=lambda r: order[r.workload.uuid])
                gated.append((package, results))
                partial = [{**make_row(p, r, {}, ceilings, gpu), "device": where[r.workload.uuid]}
                           for p, res in gated for r in res]
                _save(env, rows + partial, out_dir, tag, complete=False)  # a killed run keeps the gate's verdicts
            if builds is not None and "peer_builds" not in env:
                env["peer_builds"] = builds.wait()
            # Interleaved, the references are timed here again only for workloads with a row that lacks them (a
            # solution that failed before a trial's end, or whose reference timing failed): every row gets one.
            after = None if not interleaving else {r.workload.uuid for _, res in gated for r in res
                                                   if interleave.from_raw(r.raw) is None}
            baselines = time_all_baselines(definition, chosen, shares, devices, seed=seed, config=config,
                                           peer_names=peer_names, progress=progress, references=after)
            if timers:
                env["reference_timing_methods"] = sorted({m for t in timers for m in t.methods})
            rows.extend({**make_row(package, r, baselines.get(r.workload.uuid, {}), ceilings, gpu),
                         "device": where[r.workload.uuid]} for package, results in gated for r in results)
            _save(env, rows, out_dir, tag, complete=False)
    finally:
        if builds is not None:
            env.setdefault("peer_builds", builds.wait())
    return _save(env, rows, out_dir, tag, complete=True)


def reference_timing(config: BenchConfig, n_devices: int) -> tuple[bool, str]:
    """(interleave the references with each solution's trials?, how the results' environment says they were timed).
    Only on one device: with several, the judge's threads share this process and torch.profiler is process-wide."""
    if not config.reference:
        return False, "not timed (--no-reference)"
    if not config.interleave_reference:
        return False, interleave.AFTER_TEXT + " (--reference-after)"
    if n_devices > 1:
        return False, interleave.AFTER_TEXT + f" ({n_devices} devices: torch.profiler is one per process)"
    if config.baseline_every > 1:
        return False, interleave.AFTER_TEXT + f" (every {config.baseline_every}th workload: --baseline-every)"
    return True, interleave.INTERLEAVED_TEXT + "; after the solutions only for a workload with a row that lacks them"


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
