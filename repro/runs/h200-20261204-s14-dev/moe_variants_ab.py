# Prepared in session 14 for the next one (device): the landed MoE solution against the variants make_variants.py
# rendered, on the same inputs: rel L2 against the reference, then judge-like spans (L2 flush, sync, one call, CUPTI
# span; 3 interleaved rounds of 20 calls, median) at large T (row tiles: both patches) and T = 32 / 80 (swap-AB:
# the row-weight patch only). Run from the repository root: python3 repro/runs/h200-20261204-s14-dev/moe_variants_ab.py
import importlib.util, os, statistics, sys
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
_spec = importlib.util.spec_from_file_location("sus", Path(__file__).parent / "moe_sustained.py")
sus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sus)  # its judge-like span loop: sus.spans(list of thunks) -> us per call


def spans(thunk, n):
    return sus.spans([thunk] * n)


def main():
    definition = definitions.load(MOE)
    names = {"landed": Path("solutions/fused_moe")}
    for d in sorted((Path(__file__).parent / ".variants").iterdir()):
        names[d.name] = d
    fns = {k: solutions.build(solutions.load_package(v).solution, definition) for k, v in names.items()}
    wl = {w.axes["seq_len"]: w for w in workloads.load(MOE)}
    for T, seed in ((11948, 100), (11948, 101), (14107, 100), (901, 100), (80, 100), (32, 100)):
        x = inputs.make_inputs(definition, wl[T], seed=seed, device="cuda")
        ref = definitions.reference(MOE)(*x.values()).float()
        out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
        errs, times = {}, {k: [] for k in fns}
        for k, fn in fns.items():
            out.fill_(float("nan"))
            fn(*x.values(), out)
            torch.cuda.synchronize()
            errs[k] = float((out.float() - ref).norm() / ref.norm())
        for _ in range(3):
            for k, fn in fns.items():
                times[k] += spans(lambda fn=fn: fn(*x.values(), out), 20)
        line = ", ".join(f"{k} {statistics.median(v):.1f} us (rel L2 {errs[k]:.2e})" for k, v in times.items())
        print(f"T={T} seed {seed}: {line}")
        sys.stdout.flush()
        del x, ref, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
