# Throwaway: one MoE call's timeline under the bench's timer: kernels (start, duration) and the host API calls
# between them, relative to the first kernel's start; median span over 20 calls.
import json, os, sys, tempfile, statistics, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
d = definitions.load(moe)
fn = solutions.build(solutions.load_package(Path(sys.argv[1])).solution, d)
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
for seq in [int(s) for s in sys.argv[2].split(",")]:
    wl = next(w for w in workloads.load(moe) if w.axes["seq_len"] == seq)
    vals = list(inputs.make_inputs(d, wl, seed=0, device="cuda").values())
    out = torch.empty((seq, 7168), dtype=torch.bfloat16, device="cuda")
    for _ in range(5): fn(*vals, out)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(20):
            flush.zero_()
            with record_function(f"m-#{i}"):
                fn(*vals, out)
        torch.cuda.synchronize()
    fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
    spans = list(annotated_spans(tr, "m-#").values())
    ev = tr["traceEvents"]
    call = next(e for e in ev if e.get("name") == "m-#10")
    t0, t1 = call["ts"], call["ts"] + call["dur"]
    corr = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1 and "args" in e and "correlation" in e["args"]}
    ks = sorted([e for e in ev if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in corr], key=lambda e: e["ts"])
    k0 = ks[0]["ts"] if ks else t0
    line = " | ".join(f"{e['name'][:18]}@{e['ts']-k0:.0f}+{e['dur']:.0f}" for e in ks)
    apis = sorted([e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1], key=lambda e: e["ts"])
    api_line = " ".join(f"{e['name'].replace('cuda','')[:16]}@{e['ts']-k0:.0f}+{e['dur']:.1f}" for e in apis)
    print(f"T={seq}: span median {statistics.median(spans)*1e3:.1f} us | {line}\n   host: {api_line}", flush=True)
