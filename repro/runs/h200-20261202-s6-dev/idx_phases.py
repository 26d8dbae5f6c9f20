# Throwaway (session 6): where the long-row indexer kernel's time goes. Variants of the rendered kernel that return
# early at a phase boundary (outputs not graded: timing only), median CUPTI span of 20 cold-L2 calls.
import json, os, sys, tempfile, statistics, shutil, subprocess, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions, render
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
NAME = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
MARKS = {  # exit point -> (anchor text in indexer.cuh, insert before (True) or after (False))
    0: ("  SelectScratch* scratch =", True),
    1: ("  for (int i = 0; i < my_pages; ++i) {", True),
    2: ("  cp_async_wait<0>();  // only empty groups can remain\n", False),
    3: ("  const uint32_t pivot = prefix >> kFirstShift;\n", False),
    4: ("  cluster_arrive_release();  // the candidates are in rank 0", True),
    9: (None, None)}
POINTS = {f"c{c}e{e}": (dict(CLUSTER=c, HEAD_SPLIT=2, STAGES=4), e) for c in (8, 16) for e in MARKS}
root = Path("/tmp/idx_phase")
def package(tag):
    params, e = POINTS[tag]
    dest = root / tag
    if not dest.exists():
        shutil.copytree("solutions/dsa_topk_indexer", dest)
        py = dest / "solution" / "python"
        render.render_into("dsa_topk_indexer", params, py)
        anchor, before = MARKS[e]
        if anchor:
            src = (py / "indexer.cuh").read_text()
            assert src.count(anchor) == 1, anchor
            src = src.replace(anchor, ("  return;\n" + anchor) if before else (anchor + "  return;\n"))
            (py / "indexer.cuh").write_text(src)
    return dest
d = definitions.load(NAME)
if len(sys.argv) > 1 and sys.argv[1] == "build":
    solutions.build(solutions.load_package(package(sys.argv[2])).solution, d); sys.exit(0)
for t in POINTS: package(t)
for p in [subprocess.Popen([sys.executable, __file__, "build", t]) for t in POINTS]: p.wait()
wls = workloads.load(NAME)
longs = sorted([w for w in wls if w.axes["max_num_pages"] > 32], key=lambda w: (w.axes["batch_size"], w.axes["max_num_pages"]))
pick = [longs[0], longs[len(longs) // 3], longs[2 * len(longs) // 3], longs[-1]]
pick.append(max(longs, key=lambda w: w.axes["max_num_pages"] * 100 + w.axes["batch_size"]))
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
sets = []
for w in pick:
    ins = inputs.make_inputs(d, w, seed=1, device="cuda")
    sl = ins["seq_lens"].cpu().tolist()
    print(f"B={w.axes['batch_size']} P={w.axes['max_num_pages']}: seq_lens max {max(sl)}, rows > 2048: {sum(s > 2048 for s in sl)}", flush=True)
    sets.append((w, list(ins.values()) + [torch.empty((w.axes["batch_size"], 2048), dtype=torch.int32, device="cuda")]))
def span(fn, vals, pre=None):
    for _ in range(3): fn(*vals)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(20):
            flush.zero_()
            with record_function(f"m-#{i}"):
                fn(*vals)
        torch.cuda.synchronize()
    fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
    return statistics.median(list(annotated_spans(tr, "m-#").values())) * 1e3
for tag in POINTS:
    try:
        fn = solutions.build(solutions.load_package(package(tag)).solution, d)
    except Exception as exc:
        print(f"{tag:9s} build failed: {str(exc)[-1500:]}", flush=True); continue
    print(f"{tag:7s} " + " | ".join(f"B={w.axes['batch_size']} P={w.axes['max_num_pages']}: {span(fn, v):5.1f}" for w, v in sets), flush=True)
# an empty kernel launch and a 1-page-read for scale
x = torch.empty(1, device="cuda")
print(f"torch add_ (1 elem) span: {span(lambda *a: x.add_(1), []):5.1f}", flush=True)
