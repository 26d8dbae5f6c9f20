# Throwaway (session 20, GPU, repository root): one call of solutions/fused_moe at T,seed (default 14107,100) between
# cudaProfilerStart/Stop, after a warm-up call that JIT-builds it, for `ncu --profile-from-start off` (ncu.sh).
import os, sys
sys.path.insert(0, os.getcwd())
import torch

from sdk import definitions, inputs, solutions, workloads

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
T, seed = map(int, (sys.argv[1] if len(sys.argv) > 1 else "14107,100").split(","))
definition = definitions.load(MOE)
fn = solutions.build(solutions.load_package("solutions/fused_moe").solution, definition)
wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == T)
x = inputs.make_inputs(definition, wl, seed=seed, device="cuda")
out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
fn(*x.values(), out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
fn(*x.values(), out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("done", T, seed, float(out.float().abs().mean()))
