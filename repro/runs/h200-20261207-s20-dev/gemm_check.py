# Throwaway (session 20, GPU, repository root): the wgmma GPU test's checks on the row tiles whose bf16 epilogue
# changed (tiles 0: BM 128, 1: BM 64, 6: BM 128 x BN 256): every GEMM epilogue against fp32 torch at the test's
# three grouping shapes with cold-L2 TFLOP/s, then the whole MoE against the reference at five contest sizes.
# Exit status 1 on any failed check.
import os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import torch

import test_kernel_fused_moe_wgmma as t

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
ext = t._extension()
print(f"wgmma config: {ext.config()}", flush=True)
t._check_all(ext, reps=10, tiles=(0, 1, 6))
t._check_end_to_end(ext, seq_lens=(1, 80, 901, 11948, 14107), reps=5, tiles=(0, 1, 6), time_solution=False)
print("\n".join(t.FAILURES) or "all checks passed")
sys.exit(1 if t.FAILURES else 0)
