import sys, os, torch, time
sys.path.insert(0, os.getcwd())
from sdk import definitions, inputs, workloads, solutions
from pathlib import Path
moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
if "test" in sys.argv[1:]:
    import tests.test_kernel_fused_moe_wgmma as m
    m._extension()
    print("test ext loaded")
d = definitions.load(moe)
fn = solutions.build(solutions.load_package(Path("solutions/fused_moe")).solution, d)
for seq in [int(s) for s in sys.argv[1].split(",")]:
    wl = next(w for w in workloads.load(moe) if w.axes["seq_len"] == seq)
    vals = list(inputs.make_inputs(d, wl, seed=0, device="cuda").values())
    out = torch.empty((seq, 7168), dtype=torch.bfloat16, device="cuda")
    try:
        fn(*vals, out); torch.cuda.synchronize(); print(seq, "ok")
    except Exception as e:
        print(seq, "FAIL", str(e).splitlines()[0])
