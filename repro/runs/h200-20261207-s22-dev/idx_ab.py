# Throwaway (session 22): the indexer solution copies in .variants/idx_* beside this script (each the rendered
# package of a commit, idx_manifest.txt) against idx_main on the same inputs. Every variant must write exactly
# idx_main's output (the selection is deterministic: ties go to the lower position), on the workloads' seeded inputs
# and on three crafted rows per shape: repeated pages (every score many times over), q = 0 (all scores equal) and
# negated head weights. Then the CUPTI span of cold-L2 calls (sdk.bench.timing.time_many), 3 interleaved rounds,
# median, on the longest-table workload of batch sizes 4, 8, 14, 15, 16, 29, 30, 31 (rows over 2048 tokens), and one
# short-row workload. Folders abl_* (ablations: a part of the kernel cut out) are timed only.
# The last line names the winner: equal everywhere (bit-equal, or "~": valid and its rescored values within the gate's
# strict tolerance of idx_main's) and the least geomean latency over the long-row shapes, if at least 3% under
# idx_main's; else idx_main. Run from the repository root on the GPU.
import math, os, statistics, subprocess, sys
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads
from sdk.bench import timing
from sdk.gate import compare

NAME = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
# Variant folders: .variants beside this script, or AB_VARIANTS (folders separated by ":", first name wins).
VARIANTS = [Path(v) for v in os.environ.get("AB_VARIANTS", str(Path(__file__).parent / ".variants")).split(":")]
CALLS = int(os.environ.get("AB_CALLS", "20"))
DRY = os.environ.get("AB_DRY") == "1"  # CPU check of this script: torch fallback, no builds, wall-clock "timing"
DEV = "cpu" if DRY else "cuda"
SMOKE_S = 150  # a variant's build (nvcc, ~20-40 s) and one call per timed shape


def time_all(calls: dict) -> dict:
    if not DRY:
        return {k: v.median_ms * 1e3 for k, v in timing.time_many(calls, "cuda", warmup=3).items()}
    import time
    out = {}
    for k, (fn, n) in calls.items():
        t = time.perf_counter(); fn(); out[k] = (time.perf_counter() - t) * 1e6
    return out


def crafted(x: dict, kind: str) -> dict:
    x = {k: v.clone() for k, v in x.items()}
    if kind == "repeat":  # every row's table cycles over its first three pages: each score recurs n / 192 times
        bt = x["block_table"]
        x["block_table"] = bt[:, :3].repeat(1, (bt.shape[1] + 2) // 3)[:, : bt.shape[1]].contiguous()
    elif kind == "flat":
        x["q_index_fp8"].view(torch.uint8).zero_()
    elif kind == "negw":
        x["weights"] = -x["weights"]
    return x


def timed_shapes(wls):
    longest = {}
    for w in wls:
        b, p = w.axes["batch_size"], w.axes["max_num_pages"]
        if p * 64 > 2048 and p > longest.get(b, (0, None))[0]:
            longest[b] = (p, w)
    shapes = [longest[b][1] for b in sorted(longest) if b in (4, 8, 14, 15, 16, 29, 30, 31)]
    return shapes + [next(w for w in wls if w.axes["max_num_pages"] * 64 <= 2048)]


def smoke(folder: Path):
    definition = definitions.load(NAME)
    fn = solutions.build(solutions.load_package(folder).solution, definition)
    for wl in timed_shapes(workloads.load(NAME)):
        x = inputs.make_inputs(definition, wl, seed=1, device=DEV)
        fn(*x.values(), torch.empty(wl.axes["batch_size"], 2048, dtype=torch.int32, device=DEV))
        if not DRY:
            torch.cuda.synchronize()


def main():
    definition = definitions.load(NAME)
    wls = workloads.load(NAME)
    # abl_* folders are ablations (parts of the kernel cut out): timed only, never compared or picked.
    dirs = {}
    for v in VARIANTS:
        for d in [*sorted(v.glob("idx_*")), *sorted(v.glob("abl_*"))]:
            dirs.setdefault(d.name, d)
    assert "idx_main" in dirs, "no .variants/idx_main: run prep.sh"
    # Each variant builds and runs every timed shape once in its own process first (in parallel): a variant that
    # fails or hangs (a kernel that never returns) is left out instead of stopping the A/B.
    procs = {k: subprocess.Popen([sys.executable, __file__, "--smoke", str(d)]) for k, d in dirs.items()}
    built = {}
    for k, proc in procs.items():
        try:
            built[k] = proc.wait(timeout=SMOKE_S) == 0
        except subprocess.TimeoutExpired:
            proc.kill()
            built[k] = False
    print("built: " + ", ".join(f"{k} {'ok' if ok else 'FAILED'}" for k, ok in built.items()), flush=True)
    assert built["idx_main"], "idx_main did not build or run"
    fns = {k: solutions.build(solutions.load_package(d).solution, definition) for k, d in dirs.items() if built[k]}

    shapes = timed_shapes(wls)

    equal = {k: True for k in fns}
    lat = {k: {} for k in fns}
    print(f"{'B x P':>8s} " + " ".join(f"{k:>10s}" for k in fns) + "   (median CUPTI span, us; * = differs)")
    for wl in shapes:
        B, P = wl.axes["batch_size"], wl.axes["max_num_pages"]
        x = inputs.make_inputs(definition, wl, seed=22, device=DEV)
        cases = {"seeded": x, **{c: crafted(x, c) for c in ("repeat", "flat", "negw")}}
        outs, diff = {}, {k: [] for k in fns}
        for case, xx in cases.items():
            res = {}
            for k, fn in fns.items():
                o = torch.full((B, 2048), -7, dtype=torch.int32, device=DEV)
                fn(*xx.values(), o)
                if not DRY:
                    torch.cuda.synchronize()
                res[k] = o
            for k in fns:
                if not k.startswith("abl_") and not torch.equal(res[k], res["idx_main"]):
                    # Not bit-equal (HGMMA vs HMMA may round a score differently): still eligible if valid and its
                    # rescored values match idx_main's at the gate's strict tolerance (a tie or ULP-level swap).
                    near = compare.check_indexer(["topk_indices"], [res[k]], [res["idx_main"]],
                                                 compare.INDEXER_TIGHT, inputs=xx)
                    equal[k] = equal[k] and near.passed
                    diff[k].append(case + ("~" if near.passed else f" ({near.reason})"))
            if case == "seeded":
                outs = res
        med = {k: [] for k in fns}
        for rnd in range(3):
            order = list(fns) if rnd % 2 == 0 else list(reversed(fns))
            r = time_all({k: (lambda f=fns[k], o=outs[k]: f(*x.values(), o), CALLS) for k in order})
            for k in order:
                med[k].append(r[k])
        for k in fns:
            lat[k][(B, P)] = statistics.median(med[k])
        print(f"{B:3d} x {P:2d} " + " ".join(f"{lat[k][(B, P)]:9.2f}{'*' if diff[k] else ' '}" for k in fns))
        for k in fns:
            if diff[k]:
                print(f"         {k} differs from idx_main on: {', '.join(diff[k])} (~: within the strict rescoring)")
        sys.stdout.flush()
    long_shapes = [s for s in lat["idx_main"] if s[1] * 64 > 2048]
    geo = {k: math.exp(statistics.fmean(math.log(lat[k][s]) for s in long_shapes)) for k in fns}
    print("geomean us (long rows): " + ", ".join(f"{k} {g:.2f} ({g / geo['idx_main']:.3f}x)" for k, g in geo.items()))
    ok = {k: g for k, g in geo.items() if equal[k] and not k.startswith("abl_")}
    best = min(ok, key=ok.get) if ok else "idx_main"
    print("winner", best if ok.get(best, 1e30) <= 0.97 * geo["idx_main"] else "idx_main")


if __name__ == "__main__":
    smoke(Path(sys.argv[2])) if sys.argv[1:2] == ["--smoke"] else main()
