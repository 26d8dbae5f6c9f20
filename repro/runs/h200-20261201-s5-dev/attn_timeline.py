# Throwaway (session 5): where an attention call's time goes. Per variant of templates/dsa_sparse_attention and
# N in {1, 8}: median CUPTI span over 20 cold-L2 calls, the warm-L2 median, and one call's kernels (start+dur, us).
import json, os, sys, tempfile, statistics, shutil, subprocess, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions, render
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
BASE = dict(BLOCK_N=64, STAGES=2, NUM_WARPS=4, MAX_SPLITS=64, PDL=1, MERGE=0, QK_CHAINS=1)
VARIANTS = {"default": {}, "merge1": {"MERGE": 1}, "ms16": {"MAX_SPLITS": 16}, "ms128": {"MAX_SPLITS": 128},
            "bn32st4": {"BLOCK_N": 32, "STAGES": 4}, "merge1_ms128": {"MERGE": 1, "MAX_SPLITS": 128},
            "nopdl": {"PDL": 0}}
root = Path("/tmp/attn_var")
def package(tag):
    dest = root / tag
    if not dest.exists():
        shutil.copytree("solutions/dsa_sparse_attention", dest)
        render.render_into("dsa_sparse_attention", {**BASE, **VARIANTS[tag]}, dest / "solution" / "python")
    return dest
if len(sys.argv) > 1 and sys.argv[1] == "build":
    d = definitions.load(NAME)
    solutions.build(solutions.load_package(package(sys.argv[2])).solution, d)
    sys.exit(0)
for tag in VARIANTS: package(tag)
procs = [subprocess.Popen([sys.executable, __file__, "build", t]) for t in VARIANTS]
for p in procs: p.wait()
d = definitions.load(NAME)
wls = workloads.load(NAME)
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
def trace(fn, vals, cold, n=20):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            if cold: flush.zero_()
            with record_function(f"m-#{i}"):
                fn(*vals)
        torch.cuda.synchronize()
    fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
    return tr
for tag in VARIANTS:
    fn = solutions.build(solutions.load_package(package(tag)).solution, d)
    for N in (1, 8):
        wl = next(w for w in wls if w.axes["num_tokens"] == N)
        ins = inputs.make_inputs(d, wl, seed=0, device="cuda")
        outs = [torch.empty((N, 16, 512), dtype=torch.bfloat16, device="cuda"), torch.empty((N, 16), dtype=torch.float32, device="cuda")]
        vals = list(ins.values()) + outs
        for _ in range(5): fn(*vals)
        torch.cuda.synchronize()
        res = {}
        for cold in (True, False):
            tr = trace(fn, vals, cold)
            spans = list(annotated_spans(tr, "m-#").values())
            res[cold] = statistics.median(spans) * 1e3
        ev = tr["traceEvents"]  # the cold trace's call 10 is overwritten by warm: redo one cold trace for the line
        tr = trace(fn, vals, True)
        ev = tr["traceEvents"]
        call = next(e for e in ev if e.get("name") == "m-#10")
        t0, t1 = call["ts"], call["ts"] + call["dur"]
        corr = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1 and "correlation" in e.get("args", {})}
        ks = sorted([e for e in ev if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in corr], key=lambda e: e["ts"])
        k0 = ks[0]["ts"] if ks else t0
        line = " | ".join(f"{e['name'][:28]}@{e['ts']-k0:.1f}+{e['dur']:.1f} grid{e['args'].get('grid')}" for e in ks)
        print(f"{tag:14s} N={N}: cold {res[True]:.1f} us, warm {res[False]:.1f} us | {line}", flush=True)
