# Throwaway (session 6): the distributed-select indexer vs the session-5 kernel. Grades every long-row official
# workload per point (poisoned outputs, sdk.gate.compare.check_indexer vs the SDK reference), then the median CUPTI
# span of 20 cold-L2 calls on six long-row workloads.
import json, os, sys, tempfile, statistics, shutil, subprocess, torch
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sdk import definitions, inputs, workloads, solutions, render
from sdk.gate.spans import annotated_spans
from sdk.gate.compare import check_indexer, contest_tolerance
from tests.helpers import call_poisoned
from torch.profiler import profile, ProfilerActivity, record_function
NAME = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
P = lambda c, h, s, g: dict(CLUSTER=c, HEAD_SPLIT=h, STAGES=s, GROUPS=g)
POINTS = {"old": None, "c8g1": P(8, 2, 4, 1), "c16g1": P(16, 2, 4, 1), "c8g2": P(8, 2, 4, 2), "c16g2": P(16, 2, 4, 2),
          "c16g2s3": P(16, 2, 3, 2), "c4g2": P(4, 2, 4, 2), "c16g2s6": P(16, 2, 6, 2)}
root = Path("/tmp/idx_var")
if len(sys.argv) == 1: shutil.rmtree(root, ignore_errors=True)
def package(tag):
    if tag == "old": return Path(".scratch/s6/old/solutions/dsa_topk_indexer")
    dest = root / tag
    if not dest.exists():
        shutil.copytree("solutions/dsa_topk_indexer", dest)
        render.render_into("dsa_topk_indexer", POINTS[tag], dest / "solution" / "python")
    return dest
d = definitions.load(NAME)
if len(sys.argv) > 1 and sys.argv[1] == "build":
    solutions.build(solutions.load_package(package(sys.argv[2])).solution, d); sys.exit(0)
for t in POINTS: package(t)
if len(sys.argv) == 1:
    for p in [subprocess.Popen([sys.executable, __file__, "build", t]) for t in POINTS]: p.wait()
    for t in POINTS:
        r = subprocess.run([sys.executable, __file__, "measure", t], capture_output=True, text=True)
        print("\n".join(l for l in r.stdout.splitlines() if "arn" not in l), flush=True)
        if r.returncode: print(f"{t}: exit {r.returncode}: {r.stderr[-800:]}", flush=True)
    sys.exit(0)
ref = definitions.reference(NAME)
wls = workloads.load(NAME)
longs = sorted([w for w in wls if w.axes["max_num_pages"] > 32], key=lambda w: (w.axes["batch_size"], w.axes["max_num_pages"]))
pick = [longs[0], longs[len(longs) // 5], longs[2 * len(longs) // 5], longs[3 * len(longs) // 5], longs[4 * len(longs) // 5], longs[-1], max(longs, key=lambda w: w.axes['max_num_pages'] * 100 + w.axes['batch_size'])]
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
graded = []
for w in longs:
    x = inputs.make_inputs(d, w, seed=0, device="cuda")
    graded.append((w, x, ref(*x.values())[0]))
sets = []
for w in pick:
    ins = inputs.make_inputs(d, w, seed=1, device="cuda")
    sets.append((w, list(ins.values()) + [torch.empty((w.axes["batch_size"], 2048), dtype=torch.int32, device="cuda")]))
for tag in [sys.argv[2]]:
    try:
        fn = solutions.build(solutions.load_package(package(tag)).solution, d)
    except Exception as exc:
        print(f"{tag:9s} build failed: {str(exc)[-1500:]}", flush=True); continue
    bad = []
    for w, x, r in graded:
        outs = call_poisoned(fn, NAME, w, x)
        res = check_indexer(["topk_indices"], [outs["topk_indices"]], [r], contest_tolerance(NAME), inputs=x)
        again = call_poisoned(fn, NAME, w, x)["topk_indices"]
        if not res.passed or not torch.equal(again, outs["topk_indices"]):
            bad.append(f"{w.uuid[:8]}:{res.reason if not res.passed else 'not repeatable'}")
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
    print(f"{tag:9s} graded {len(graded) - len(bad)}/{len(graded)} | " + " | ".join(cells), flush=True)
    for b in bad[:5]: print("   FAIL", b[:300], flush=True)
