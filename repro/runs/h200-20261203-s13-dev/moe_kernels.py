# Throwaway (session 13): every kernel of one cold-L2 MoE call (start offset from the call's first kernel, duration;
# median of 5 calls) at T = 1 with 1 and 2 local experts, T = 7 (1.64x its bound in the s12 repro), T = 16 and
# T = 11948, through s9's timeline helper (its swap-AB marks patch no longer applies). Run from the repo root.
import importlib.util, os, sys
sys.path.insert(0, os.getcwd())
import torch

from sdk import definitions, inputs, solutions, workloads

spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
s9 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s9)


def main():
    definition = definitions.load(s9.MOE)
    fn = solutions.build(solutions.load_package(s9.SOLUTION).solution, definition)
    gen = torch.Generator().manual_seed(9)
    wl = {w.axes["seq_len"]: w for w in workloads.load(s9.MOE)}
    base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
    cases = [(f"T=1, {k} local experts", s9.with_local_experts(base, k, gen)) for k in (1, 2)]
    for t in (7, 16, 11948):
        x = inputs.make_inputs(definition, wl[t], seed=9, device="cuda")
        cases.append((f"T={t}, own routing ({s9.local_count(x)} local experts)", x))
    for label, x in cases:
        out = torch.empty((x["hidden_states"].shape[0], 7168), dtype=torch.bfloat16, device="cuda")
        fn(*x.values(), out)
        med, span = s9.timeline(fn, x, out)
        print(f"{label}: span {span:.1f} us (median of 5 cold-L2 calls)")
        for name, start, dur in med:
            print(f"  {name[:60]:60s} start {start:7.1f}  dur {dur:7.1f}  end {start + dur:7.1f} us")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
