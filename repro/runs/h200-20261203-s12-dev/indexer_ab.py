# Throwaway (session 12): the indexer with ONE_WAVE = 1 (the tree's) against ONE_WAVE = 0 (CLUSTER CTAs per row
# always, two waves beyond), same entry-load changes: CUPTI span of cold-L2 calls (sdk.bench.timing.time_many), the
# two builds interleaved over 3 rounds, on the repro's shapes where the policy changes the cluster (B = 16, 29-31).
# Outputs must be equal (both select exactly). Run from the repository root on the GPU.
import os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, regenerate, solutions, workloads
from sdk.bench import timing

IDX = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
SOLUTION = Path("solutions/dsa_topk_indexer")


def variant(one_wave: int) -> Path:
    dest = Path(tempfile.mkdtemp()) / f"indexer_wave{one_wave}"
    shutil.copytree(SOLUTION, dest)
    toml = dest / "render.toml"
    toml.write_text(toml.read_text().replace("ONE_WAVE = 1", f"ONE_WAVE = {one_wave}"))
    regenerate.rewrite(dest)
    return dest


def main():
    definition = definitions.load(IDX)
    wls = workloads.load(IDX)
    fns = {k: solutions.build(solutions.load_package(variant(k)).solution, definition) for k in (0, 1)}
    shapes = [(16, 38), (16, 43), (31, 43), (30, 44), (30, 91), (29, 89), (15, 91), (4, 45)]
    print(f"{'shape':16s} {'wave0 us':>9s} {'wave1 us':>9s} {'ratio':>6s}  equal")
    for B, P in shapes:
        wl = next((w for w in wls if w.axes["batch_size"] == B and w.axes["max_num_pages"] == P), None)
        if wl is None:
            print(f"B={B} P={P}: no workload"); continue
        x = inputs.make_inputs(definition, wl, seed=12, device="cuda")
        outs = {k: torch.full((B, 2048), -7, dtype=torch.int32, device="cuda") for k in fns}
        for k, fn in fns.items():
            fn(*x.values(), outs[k])
        torch.cuda.synchronize()
        equal = bool(torch.equal(outs[0], outs[1]))
        med = {k: [] for k in fns}
        for rnd in range(3):
            order = (0, 1) if rnd % 2 == 0 else (1, 0)
            res = timing.time_many({k: (lambda f=fns[k], o=outs[k]: f(*x.values(), o), 30) for k in order}, "cuda",
                                   warmup=3)
            for k in order:
                med[k].append(res[k].median_ms * 1e3)
        a, b = statistics.median(med[0]), statistics.median(med[1])
        print(f"B={B:2d} P={P:2d}       {a:9.1f} {b:9.1f} {b / a:6.3f}  {equal}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
