# Throwaway device call (session 10): the s9-dev diagnostics, the GPU test suite, the wgmma draft vs cancelling_heads.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=5dfc084
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/env.txt 2>&1
S=repro/runs/h200-20261203-s9-dev
timeout 200 python3 $S/moe_timeline.py > $OUT/moe_timeline.txt 2>&1; echo "moe rc $?" >> $OUT/rc.txt
timeout 90 python3 $S/attn_timeline.py > $OUT/attn_timeline.txt 2>&1; echo "attn rc $?" >> $OUT/rc.txt
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernel_dsa_topk_indexer.py tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py tests/test_kernel_dsa_sparse_attention.py tests/adversarial > $OUT/gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
git apply repro/runs/h200-20261203-s9-repro/wip-indexer-wgmma-scoring.patch && python3 -c "from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path('solutions/dsa_topk_indexer'))" && timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernel_dsa_topk_indexer.py -k cancelling > $OUT/wgmma_cancelling.txt 2>&1; echo "wgmma rc $?" >> $OUT/rc.txt
