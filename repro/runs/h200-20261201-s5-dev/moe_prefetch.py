# Throwaway (session 5): the MoE with GEMM1 prefetching GEMM2's weights into L2, at L2_PREFETCH_MB 0/16/32/48.
# Per T: median CUPTI span over 20 cold-L2 calls, one call's kernels, and whether the output is bit-identical to
# the no-prefetch build's (a prefetch must not change a single bit).
import json, os, sys, tempfile, statistics, shutil, subprocess, tomllib, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions, render
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
BASE = tomllib.loads(Path("solutions/fused_moe/render.toml").read_text())["params"]
VARIANTS = {f"pf{mb}": {"L2_PREFETCH_MB": mb} for mb in (0, 16, 32, 48)}
root = Path("/tmp/moe_var")
def package(tag):
    dest = root / tag
    if not dest.exists():
        shutil.copytree("solutions/fused_moe", dest)
        render.render_into("fused_moe", {**BASE, **VARIANTS[tag]}, dest / "solution" / "python")
    return dest
d = definitions.load(MOE)
if len(sys.argv) > 1 and sys.argv[1] == "build":
    solutions.build(solutions.load_package(package(sys.argv[2])).solution, d); sys.exit(0)
for tag in VARIANTS: package(tag)
for p in [subprocess.Popen([sys.executable, __file__, "build", t]) for t in VARIANTS]: p.wait()
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
def trace(fn, vals, n=20):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            flush.zero_()
            with record_function(f"m-#{i}"):
                fn(*vals)
        torch.cuda.synchronize()
    fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
    return tr
fns = {tag: solutions.build(solutions.load_package(package(tag)).solution, d) for tag in VARIANTS}
seqs = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 7, 16, 57, 80, 901]
for seq in seqs:
    wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == seq)
    vals = list(inputs.make_inputs(d, wl, seed=0, device="cuda").values())
    ref_out = None
    for tag, fn in fns.items():
        out = torch.full((seq, 7168), float("nan"), dtype=torch.bfloat16, device="cuda")
        fn(*vals, out); torch.cuda.synchronize()
        if ref_out is None: ref_out = out.clone()
        same = torch.equal(out.view(torch.int16), ref_out.view(torch.int16))
        for _ in range(3): fn(*vals, out)
        tr = trace(fn, vals + [out])
        spans = list(annotated_spans(tr, "m-#").values())
        ev = tr["traceEvents"]
        call = next(e for e in ev if e.get("name") == "m-#10")
        t0, t1 = call["ts"], call["ts"] + call["dur"]
        corr = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1 and "correlation" in e.get("args", {})}
        ks = sorted([e for e in ev if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in corr], key=lambda e: e["ts"])
        k0 = ks[0]["ts"] if ks else t0
        line = " | ".join(f"{e['name'][6:22]}@{e['ts']-k0:.0f}+{e['dur']:.0f}" for e in ks)
        print(f"T={seq:5d} {tag:5s} median {statistics.median(spans)*1e3:7.1f} us (min {min(spans)*1e3:.1f}) bit-identical {same} | {line}", flush=True)
