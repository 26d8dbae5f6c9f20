# Throwaway (session 10): why T=1 with the workload's own seed-9 routing (0 local experts) took 29 us in moe_ab.py
# large, against 12 us for a 0-local routing made by pushing the local logits down: both, twice, in both orders.
import importlib.util, os, sys
sys.path.insert(0, os.getcwd())
import torch
from sdk import definitions, inputs, solutions, workloads
from sdk.bench import timing
spec = importlib.util.spec_from_file_location("mt", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
mt = importlib.util.module_from_spec(spec); spec.loader.exec_module(mt)
d = definitions.load(mt.MOE)
fn = solutions.build(solutions.load_package(mt.SOLUTION).solution, d)
wl = {w.axes["seq_len"]: w for w in workloads.load(mt.MOE)}
base = inputs.make_inputs(d, wl[1], seed=9, device="cuda")
pushed = mt.with_local_experts(base, 0, torch.Generator().manual_seed(9))
out = torch.empty((1, 7168), dtype=torch.bfloat16, device="cuda")
print({k: (type(v).__name__, getattr(v, "dtype", None), getattr(v, "device", None)) for k, v in base.items() if not hasattr(v, "shape") or v.dim() == 0})
for rnd in range(2):
    for name, x in ([("workload", base), ("pushed", pushed)] if rnd == 0 else [("pushed", pushed), ("workload", base)]):
        r = timing.time_many({name: (lambda x=x: fn(*x.values(), out), 30)}, "cuda", warmup=3)[name]
        med, _ = mt.timeline(fn, x, out)
        print(f"round {rnd} {name:9s} span median {r.median_ms * 1e3:6.1f} us; kernels", [(n[:22], round(s_, 1), round(du, 1)) for n, s_, du in med])
        sys.stdout.flush()
