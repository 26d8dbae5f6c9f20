# Throwaway (session 19, GPU, repository root): the wgmma GPU test's checks restricted to what the wide tiles need, to
# save device time: every GEMM epilogue of tile 0 (BM 128 x BN 128) and tile 6 (BM 128 x BN 256) against fp32 torch
# at the test's three grouping shapes, with their cold-L2 TFLOP/s side by side, then the whole MoE on both tiles
# against the reference at five contest sizes. Exit status 1 on any failed check.
import os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import torch

import test_kernel_fused_moe_wgmma as t

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
ext = t._extension()
print(f"wgmma config: {ext.config()}", flush=True)
t._check_all(ext, reps=10, tiles=(0, 6))
t._check_end_to_end(ext, seq_lens=(1, 80, 901, 11948, 14107), reps=5, tiles=(0, 6), time_solution=False)
print("\n".join(t.FAILURES) or "all checks passed")
sys.exit(1 if t.FAILURES else 0)
