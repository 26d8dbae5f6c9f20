import sys, os, time, torch
sys.path.insert(0, os.getcwd())
import tests.test_kernel_fused_moe_wgmma as m
from sdk import definitions, inputs, workloads, solutions
from pathlib import Path
from torch.profiler import profile, ProfilerActivity
moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
d = definitions.load(moe)
flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
mode = sys.argv[1]
if mode == "sol":
    fn = solutions.build(solutions.load_package(Path("solutions/fused_moe")).solution, d)
else:
    ext = m._extension(); tile = int(mode)
from sdk.bench.floors import _moe_route
for seq in [int(s) for s in sys.argv[2].split(",")]:
    wl = next(w for w in workloads.load(moe) if w.axes["seq_len"] == seq)
    vals = list(inputs.make_inputs(d, wl, seed=0, device="cuda").values())
    experts, _ = _moe_route()(vals[0].float().cpu(), vals[1].cpu(), float(vals[9]))
    off = int(vals[8]); loc = experts[(experts >= off) & (experts < off + 32)]
    active = len(set(loc.tolist()))
    out = torch.empty((seq, 7168), dtype=torch.bfloat16, device="cuda")
    if mode == "sol":
        f = lambda: fn(*vals, out)
    else:
        f = lambda: ext.forward(*vals[:8], m._scalar(vals[8], int), m._scalar(vals[9], float), out, tile=tile)
    for _ in range(3): f()
    torch.cuda.synchronize()
    host = []
    for _ in range(20):
        torch.cuda.synchronize(); t0 = time.perf_counter(); f(); host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    spans, lines = [], None
    for rep in range(5):
        flush.zero_(); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            f(); torch.cuda.synchronize()
        ev = sorted([e for e in p.events() if e.device_type.name == "CUDA" and "elementwise" not in e.name and "fill" not in e.name.lower()], key=lambda e: e.time_range.start)
        t0 = ev[0].time_range.start
        spans.append(ev[-1].time_range.end - t0)
        if rep == 2:
            lines = " ".join(f"{e.name.split('<')[0].split('(')[0].split('::')[-1][:14]}@{e.time_range.start - t0:.0f}+{e.time_range.end - e.time_range.start:.0f}" for e in ev)
    host.sort(); spans.sort()
    print(f"T={seq} local picks {len(loc)} active {active}: span {spans[2]:.1f} us, host enqueue {host[10]:.1f} us | {lines}", flush=True)
