# Throwaway (session 5): the indexer template's points on long-row workloads. Median CUPTI span of 20 cold-L2
# calls per (point, workload), one input set each; sets the next session's starting point for the long rows.
import json, os, sys, tempfile, statistics, shutil, subprocess, itertools, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions, render
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
NAME = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
POINTS = {f"c{c}h{h}s{s}": dict(CLUSTER=c, HEAD_SPLIT=h, STAGES=s) for c, h, s in itertools.product((8, 16), (2, 4), (4, 6))}
root = Path("/tmp/idx_var")
def package(tag):
    dest = root / tag
    if not dest.exists():
        shutil.copytree("solutions/dsa_topk_indexer", dest)
        render.render_into("dsa_topk_indexer", POINTS[tag], dest / "solution" / "python")
    return dest
d = definitions.load(NAME)
if len(sys.argv) > 1 and sys.argv[1] == "build":
    solutions.build(solutions.load_package(package(sys.argv[2])).solution, d); sys.exit(0)
for t in POINTS: package(t)
for p in [subprocess.Popen([sys.executable, __file__, "build", t]) for t in POINTS]: p.wait()
wls = workloads.load(NAME)
longs = sorted([w for w in wls if w.axes["max_num_pages"] > 32], key=lambda w: (w.axes["batch_size"], w.axes["max_num_pages"]))
pick = [longs[0], longs[len(longs) // 3], longs[2 * len(longs) // 3], longs[-1]]
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
sets = []
for w in pick:
    ins = inputs.make_inputs(d, w, seed=0, device="cuda")
    B = w.axes["batch_size"]
    sets.append((w, list(ins.values()) + [torch.empty((B, 2048), dtype=torch.int32, device="cuda")]))
for tag in POINTS:
    try:
        fn = solutions.build(solutions.load_package(package(tag)).solution, d)
    except Exception as exc:
        print(f"{tag:9s} build failed: {str(exc).splitlines()[0][:200]}", flush=True); continue
    cells = []
    for w, vals in sets:
        for _ in range(3): fn(*vals)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(20):
                flush.zero_()
                with record_function(f"m-#{i}"):
                    fn(*vals)
            torch.cuda.synchronize()
        fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
        spans = list(annotated_spans(tr, "m-#").values())
        cells.append(f"B={w.axes['batch_size']} P={w.axes['max_num_pages']}: {statistics.median(spans)*1e3:5.1f}")
    print(f"{tag:9s} " + " | ".join(cells), flush=True)
