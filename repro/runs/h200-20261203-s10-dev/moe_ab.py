# Throwaway (session 10): EARLY_WEIGHTS=0 (the landed chain) against EARLY_WEIGHTS=1 (swap-AB GEMMs issue their
# first weight stages before pdl_wait) on the same inputs: CUPTI span of cold-L2 calls (sdk.bench.timing.time_many,
# which does not sync after the flush), the two builds interleaved over 3 rounds; error vs the official reference.
# Run from the repository root on the GPU: python3 repro/runs/h200-20261203-s10-dev/moe_ab.py [large|patch OTHER_SOLUTION_DIR]
# Columns: CUPTI span with the launches queued behind the flush (GPU time), then the judge-like span (sync after
# the flush: host gaps between launches count).
import importlib.util, os, statistics, sys, tempfile, shutil
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, regenerate, solutions, workloads
from sdk.bench import timing

spec = importlib.util.spec_from_file_location("mt", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
mt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mt)


def variant(early: int) -> Path:
    dest = Path(tempfile.mkdtemp()) / f"fused_moe_early{early}"
    shutil.copytree(mt.SOLUTION, dest)
    toml = dest / "render.toml"
    toml.write_text(toml.read_text().replace("EARLY_WEIGHTS = 1", f"EARLY_WEIGHTS = {early}"))
    regenerate.rewrite(dest)
    return dest


def judge_like(fns: dict, x: dict, outs: dict, iters: int = 30) -> dict:
    """Spans as the judge's worker times them: flush L2, synchronise, then the call (so nothing queues behind the
    flush and host gaps between the call's launches count), device-synchronised, under the profiler."""
    from torch.profiler import ProfilerActivity, profile, record_function
    from sdk.gate.spans import annotated_spans
    flush = timing.l2_flush_buffer(torch.device("cuda"))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(iters):
            for key, fn in fns.items():
                flush.zero_()
                torch.cuda.synchronize()
                with record_function(f"ab-{key}-#{i}"):
                    fn(*x.values(), outs[key])
                    torch.cuda.synchronize()
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(path))
    import json
    trace = json.loads(path.read_text())
    return {key: statistics.median(annotated_spans(trace, f"ab-{key}-#").values()) * 1e3 for key in fns}


def compare(fns: dict, cases: list, label_a: str, label_b: str):
    ref_fn = definitions.reference(mt.MOE)
    a_key, b_key = list(fns)
    print(f"{'case':22s} {label_a:>11s} {label_b:>11s} {'ratio':>6s}   rel-L2 (a / b)")
    for label, x in cases:
        outs = {e: torch.empty((x["hidden_states"].shape[0], 7168), dtype=torch.bfloat16, device="cuda") for e in fns}
        ref = ref_fn(*x.values()).float()
        errs = {}
        for e, fn in fns.items():
            outs[e].fill_(float("nan"))
            fn(*x.values(), outs[e])
            torch.cuda.synchronize()
            d = outs[e].float() - ref
            errs[e] = float(d.norm() / ref.norm().clamp_min(1e-30)) if bool(torch.isfinite(outs[e].float()).all()) else float("nan")
        med = {e: [] for e in fns}
        for rnd in range(3):
            order = (a_key, b_key) if rnd % 2 == 0 else (b_key, a_key)
            res = timing.time_many({e: (lambda f=fns[e], o=outs[e]: f(*x.values(), o), 30) for e in order}, "cuda",
                                   warmup=3)
            for e in order:
                med[e].append(res[e].median_ms * 1e3)
        a, b = statistics.median(med[a_key]), statistics.median(med[b_key])
        judge = judge_like(fns, x, outs)
        print(f"{label:22s} {a:11.1f} {b:11.1f} {b / a:6.3f}   {errs[a_key]:.2e} / {errs[b_key]:.2e}   rounds "
              f"{[round(v, 1) for v in med[a_key]]} {[round(v, 1) for v in med[b_key]]}   judge-like spans "
              f"{judge[a_key]:.1f} / {judge[b_key]:.1f} us")
        sys.stdout.flush()


def main():
    definition = definitions.load(mt.MOE)
    wl = {w.axes["seq_len"]: w for w in workloads.load(mt.MOE)}
    if sys.argv[1:2] == ["patch"]:
        # OTHER_SOLUTION_DIR (a copy of the landed solution) against the tree's, with wip-moe-s10-next.patch applied
        # and rendered (repro/README.md, session 10, has the commands)
        dirs = {"landed": Path(sys.argv[2]), "patched": mt.SOLUTION}
        fns = {k: solutions.build(solutions.load_package(d).solution, definition) for k, d in dirs.items()}
        gen = torch.Generator().manual_seed(9)
        base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
        cases = [(f"T=1, {k} local", mt.with_local_experts(base, k, gen)) for k in (0, 1, 2)]
        for T in (7, 16, 80, 901, 14107):
            x = inputs.make_inputs(definition, wl[T], seed=10, device="cuda")
            cases.append((f"T={T} ({mt.local_count(x)} local)", x))
        return compare(fns, cases, "landed us", "patched us")
    if sys.argv[1:2] == ["large"]:
        # the landed solution (7f05fe9: gather triggers its dependents right after its pdl_wait on every path)
        # against OTHER_SOLUTION_DIR = e947f53's (row-tile plans: gather triggers at its exit, as before 7f05fe9)
        dirs = {"e947f53": Path(sys.argv[2]), "7f05fe9": mt.SOLUTION}
        fns = {k: solutions.build(solutions.load_package(d).solution, definition) for k, d in dirs.items()}
        cases = []
        for T in (11948, 14107, 1, 16):
            for seed in (9, 10):
                x = inputs.make_inputs(definition, wl[T], seed=seed, device="cuda")
                cases.append((f"T={T} s{seed} ({mt.local_count(x)} local)", x))
        compare(fns, cases, "e947f53 us", "7f05fe9 us")
        for T in (7, 14107):  # kernel durations of the landed solution (profiler start offsets are not read)
            x = inputs.make_inputs(definition, wl[T], seed=9, device="cuda")
            out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
            med, _ = mt.timeline(fns["7f05fe9"], x, out)
            print(f"T={T} ({mt.local_count(x)} local), 7f05fe9 kernels (median of 5 cold-L2 calls):")
            for name, _start, dur in med:
                print(f"  {name[:40]:40s} dur {dur:7.1f} us")
        return
    fns = {e: solutions.build(solutions.load_package(variant(e)).solution, definition) for e in (0, 1)}
    gen = torch.Generator().manual_seed(9)
    base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
    cases = [(f"T=1, {k} local", mt.with_local_experts(base, k, gen)) for k in (0, 1, 2, 4, 8)]
    for T in (7, 16, 32, 80, 901):
        x = inputs.make_inputs(definition, wl[T], seed=9, device="cuda")
        cases.append((f"T={T} ({mt.local_count(x)} local)", x))
    compare(fns, cases, "early=0 us", "early=1 us")


if __name__ == "__main__":
    main()
