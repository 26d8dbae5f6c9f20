# Throwaway (session 16): the MoE solution in solutions/fused_moe (the candidate) against the copies rendered into
# .variants/<name>/ beside this script (each under its own extension name), on the same inputs: rel L2 against the
# official reference (NaN-poisoned output), then judge-like CUPTI spans (L2 flush, sync, one call; interleaved
# rounds, median). T = 1 over several seeds, labelled by their local-expert count (0 / 1 / 2 ... experts decide it).
# Run from the repository root on the GPU: python3 repro/runs/h200-20261206-s16-dev/moe_ab.py [T,seed ...]
import importlib.util, os, statistics, sys
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads
from sdk.bench.floors import moe_work

HERE = Path(__file__).parent
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
_spec = importlib.util.spec_from_file_location("sus", HERE.parent / "h200-20261204-s14-dev" / "moe_sustained.py")
sus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sus)  # its judge-like span loop: sus.spans(list of thunks) -> us per call

CASES = [(1, s) for s in range(100, 104)] + [(7, 100), (16, 100), (32, 100), (80, 100), (901, 100), (11948, 100),
                                              (11948, 101), (14107, 100)]


def main():
    definition = definitions.load(MOE)
    names = {"cand": Path("solutions/fused_moe")}
    vdir = HERE / ".variants"
    for d in sorted(vdir.iterdir()) if vdir.exists() else []:
        names[d.name] = d
    if sys.argv[1:2] == ["prebuild"]:  # compile one variant's extension (JIT) with one T = 1 call, then exit
        fn = solutions.build(solutions.load_package(names[sys.argv[2]]).solution, definition)
        wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == 1)
        x = inputs.make_inputs(definition, wl, seed=0, device="cuda")
        fn(*x.values(), torch.empty((1, 7168), dtype=torch.bfloat16, device="cuda"))
        torch.cuda.synchronize()
        return
    cases = [tuple(map(int, a.split(","))) for a in sys.argv[1:]] or CASES
    fns = {k: solutions.build(solutions.load_package(v).solution, definition) for k, v in names.items()}
    wl = {w.axes["seq_len"]: w for w in workloads.load(MOE)}
    rounds, per = (3, int(os.environ.get("AB_PER", "15")))
    for T, seed in cases:
        x = inputs.make_inputs(definition, wl[T], seed=seed, device="cuda")
        work = moe_work(x)
        ref = definitions.reference(MOE)(*x.values()).float()
        out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
        errs, times = {}, {k: [] for k in fns}
        for k, fn in fns.items():
            out.fill_(float("nan"))
            fn(*x.values(), out)
            torch.cuda.synchronize()
            errs[k] = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)) if ref.abs().any() else \
                float(out.float().abs().max())
        for _ in range(rounds):
            for k, fn in fns.items():
                times[k] += sus.spans([lambda fn=fn: fn(*x.values(), out)] * per)
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med.get("landed")
        line = ", ".join(f"{k} {m:.1f} us" + (f" ({m / base:.3f}x)" if base and k != "landed" else "") +
                         f" [err {errs[k]:.2e}]" for k, m in med.items())
        print(f"T={T} seed {seed} local experts {work.detail['active_local_experts']} "
              f"(rows {work.detail['assignments']}): {line}")
        sys.stdout.flush()
        del x, ref, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
