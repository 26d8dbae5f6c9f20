# Throwaway (session 14): per-kernel durations of one cold-L2 MoE call at T = 11948 / 14107 on the draws that ran at
# 0.70 PFLOP/s in call 1 (seed 100, 101), with each draw's FLOPs and padded-tile FLOPs (128-row tiles per expert).
import importlib.util, os, sys
sys.path.insert(0, os.getcwd())
import torch

from sdk import definitions, inputs, solutions, workloads
from sdk.bench.floors import moe_work

spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
s9 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s9)

definition = definitions.load(s9.MOE)
fn = solutions.build(solutions.load_package(s9.SOLUTION).solution, definition)
wl = {w.axes["seq_len"]: w for w in workloads.load(s9.MOE)}
for T, seed in ((11948, 9), (11948, 100), (11948, 101), (14107, 100)):
    x = inputs.make_inputs(definition, wl[T], seed=seed, device="cuda")
    w = moe_work(x)
    per = w.detail["tokens_per_local_expert"]
    padded = sum((c + 127) // 128 * 128 for c in per)
    f1 = 2 * 7168 * 4096
    f2 = 2 * 2048 * 7168
    out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
    fn(*x.values(), out)
    med, span = s9.timeline(fn, x, out)
    print(f"T={T} seed {seed}: assignments {sum(per)}, padded rows {padded}, flops {w.flops / 1e12:.3f} T; span {span:.1f} us")
    print(f"   per expert: {per}")
    for name, start, dur in med:
        print(f"  {name[:50]:50s} start {start:7.1f}  dur {dur:7.1f}  end {start + dur:7.1f} us")
    g = [d for n, _, d in med if "grouped_gemm" in n]
    if len(g) == 2:
        print(f"   GEMM1 {sum(per) * f1 / g[0] / 1e9:.3f} PFLOP/s useful ({padded * f1 / g[0] / 1e9:.3f} padded); "
              f"GEMM2 {sum(per) * f2 / g[1] / 1e9:.3f} useful ({padded * f2 / g[1] / 1e9:.3f} padded)")
    sys.stdout.flush()
