# Throwaway (session 13): is the ~10 us hole between route_permute and gather_rows at T = 7 the host? One cold-L2
# call profiled with CPU + CUDA activities: every CUDA runtime call (launches) and every kernel, times from the
# first runtime launch of the call, median of 5 calls. Also the same call timed with CUDA events. Repo root, GPU.
import json, os, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path
import torch
from torch.profiler import ProfilerActivity, profile

from sdk import definitions, inputs, solutions, workloads



def main():
    import importlib.util
    spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
    s9 = importlib.util.module_from_spec(spec); spec.loader.exec_module(s9)
    definition = definitions.load(s9.MOE)
    fn = solutions.build(solutions.load_package(s9.SOLUTION).solution, definition)
    wl = {w.axes["seq_len"]: w for w in workloads.load(s9.MOE)}
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    for t in (7, 16):
        x = inputs.make_inputs(definition, wl[t], seed=9, device="cuda")
        out = torch.empty((t, 7168), dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            fn(*x.values(), out)
        torch.cuda.synchronize()
        per = {}
        for _ in range(5):
            flush.zero_(); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn(*x.values(), out)
                torch.cuda.synchronize()
            path = Path(tempfile.mkstemp(suffix=".json")[1]); prof.export_chrome_trace(str(path))
            ev = json.loads(path.read_text())["traceEvents"]
            rt = [e for e in ev if e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")]
            k = [e for e in ev if e.get("cat") == "kernel"]
            if not rt or not k:
                continue
            t0 = min(e["ts"] for e in rt)
            for i, e in enumerate(sorted(rt, key=lambda e: e["ts"])):
                per.setdefault(("launch", i, e["name"][:24]), []).append((e["ts"] - t0, e["dur"]))
            for i, e in enumerate(sorted(k, key=lambda e: e["ts"])):
                per.setdefault(("kernel", i, e["name"][:40]), []).append((e["ts"] - t0, e["dur"]))
        print(f"T={t}: from the call's first launch API call (us), median of 5")
        for key in sorted(per, key=lambda k: statistics.median(a for a, _ in per[k])):
            v = per[key]
            s, d = statistics.median(a for a, _ in v), statistics.median(b for _, b in v)
            print(f"  {key[0]:6s} {key[2]:42s} start {s:7.1f} dur {d:6.1f} end {s + d:7.1f}")
        ms = []
        for _ in range(10):
            flush.zero_(); torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(*x.values(), out); b.record(); torch.cuda.synchronize()
            ms.append(a.elapsed_time(b) * 1e3)
        print(f"  CUDA events around the call (no profiler): median {statistics.median(ms):.1f} us")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
