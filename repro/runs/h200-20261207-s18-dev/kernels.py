# Throwaway (session 18): per-kernel device time of each MoE variant (solutions/fused_moe = "cand", and every copy in
# the s16 .variants folder) on the same inputs, to see which kernel a variant slows down. Per case: 2 warm calls,
# then 6 profiled calls (L2 flushed before each); each kernel's mean duration per call, by name (templates cut).
# Run from the repository root on the GPU: python3 kernels.py T,seed ...
import collections, os, sys
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from sdk import definitions, inputs, solutions, workloads

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
V = Path("repro/runs/h200-20261206-s16-dev/.variants")
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")


def short(name):
    name = name.split("(")[0]
    return (name.split("<")[0] + ("<..>" if "<" in name else ""))[-48:]


def main():
    definition = definitions.load(MOE)
    names = {"cand": Path("solutions/fused_moe"), **{d.name: d for d in sorted(V.iterdir())}}
    fns = {k: solutions.build(solutions.load_package(v).solution, definition) for k, v in names.items()}
    wl = {w.axes["seq_len"]: w for w in workloads.load(MOE)}
    for arg in sys.argv[1:]:
        T, seed = map(int, arg.split(","))
        x = inputs.make_inputs(definition, wl[T], seed=seed, device="cuda")
        out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
        rows = {}
        for k, fn in fns.items():
            for _ in range(2):
                fn(*x.values(), out)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(6):
                    flush.zero_()
                    fn(*x.values(), out)
                torch.cuda.synchronize()
            per = collections.defaultdict(float)
            for e in prof.events():
                if e.device_type.name == "CUDA" and "zero_" not in e.name and "fill" not in e.name.lower():
                    per[short(e.name)] += e.device_time / 6
            rows[k] = per
        kernels = sorted({n for p in rows.values() for n in p}, key=lambda n: -rows["landed"].get(n, 0))
        print(f"T={T} seed {seed}: us per call by kernel")
        print(f"{'kernel':50s}" + "".join(f"{k:>12s}" for k in rows))
        for n in kernels:
            print(f"{n:50s}" + "".join(f"{rows[k].get(n, 0):12.1f}" for k in rows))
        print(f"{'sum':50s}" + "".join(f"{sum(rows[k].values()):12.1f}" for k in rows))
        sys.stdout.flush()
        del x, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
