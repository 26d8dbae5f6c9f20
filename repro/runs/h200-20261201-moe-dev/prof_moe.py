import sys, os, json, torch
sys.path.insert(0, os.getcwd())
import tests.test_kernel_fused_moe_wgmma as m
from sdk import definitions, inputs, workloads
from torch.profiler import profile, ProfilerActivity
ext = m._extension()
moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
d = definitions.load(moe)
flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
tiles = [int(t) for t in sys.argv[1].split(",")]
seqs = [int(s) for s in sys.argv[2].split(",")]
for seq in seqs:
    wl = next(w for w in workloads.load(moe) if w.axes["seq_len"] == seq)
    vals = list(inputs.make_inputs(d, wl, seed=0, device="cuda").values())
    out = torch.empty((seq, 7168), dtype=torch.bfloat16, device="cuda")
    for tile in tiles:
        f = lambda: ext.forward(*vals[:8], m._scalar(vals[8], int), m._scalar(vals[9], float), out, tile=tile)
        for _ in range(3): f()
        torch.cuda.synchronize()
        res = {}
        spans = []
        for _ in range(5):
            flush.zero_(); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                f(); torch.cuda.synchronize()
            ev = [e for e in p.events() if e.device_type.name == "CUDA" and "fill" not in e.name and "zero" not in e.name.lower()]
            ks = [(e.name.split("<")[0].split("(")[0].replace("void fused_moe::wg::", "").replace("void fused_moe::", ""), e.time_range.start, e.time_range.end) for e in ev]
            if ks:
                spans.append(max(k[2] for k in ks) - min(k[1] for k in ks))
            for n, s, e in ks:
                res.setdefault(n, []).append(e - s)
        med = lambda v: sorted(v)[len(v)//2]
        act = None
        print(f"T={seq} tile={tile} span {med(spans):.1f} us | " + ", ".join(f"{n} {med(v):.1f}" for n, v in res.items()), flush=True)
