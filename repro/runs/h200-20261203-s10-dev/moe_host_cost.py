# Throwaway (session 10): host time to enqueue one MoE call at T=1 (no sync inside), bare and under the profiler.
import importlib.util, os, sys, time, statistics
sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile
from sdk import definitions, inputs, solutions, workloads
spec = importlib.util.spec_from_file_location("mt", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
mt = importlib.util.module_from_spec(spec); spec.loader.exec_module(mt)
d = definitions.load(mt.MOE)
fn = solutions.build(solutions.load_package(mt.SOLUTION).solution, d)
wl = {w.axes["seq_len"]: w for w in workloads.load(mt.MOE)}
x = inputs.make_inputs(d, wl[1], seed=9, device="cuda")
out = torch.empty((1, 7168), dtype=torch.bfloat16, device="cuda")
busy = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
for label, ctx in (("bare", None), ("profiler", True)):
    fn(*x.values(), out); torch.cuda.synchronize()
    ts = []
    p = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if ctx else None
    if p: p.__enter__()
    for _ in range(30):
        busy.zero_()  # keep the GPU busy so enqueueing never waits on it
        t = time.perf_counter(); fn(*x.values(), out); ts.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    if p: p.__exit__(None, None, None)
    t = time.perf_counter(); torch.empty(0, device="cuda"); e = (time.perf_counter() - t) * 1e6
    print(f"{label}: host enqueue per call median {statistics.median(ts):.1f} us (min {min(ts):.1f}, max {max(ts):.1f}); torch.empty {e:.1f} us")
