# Throwaway device call (session 10): the s9-dev timelines (fixed), then the GPU test suite, adversarial first.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=5dfc084
S=repro/runs/h200-20261203-s9-dev
timeout 200 python3 $S/moe_timeline.py > $OUT/moe_timeline.txt 2>&1; echo "moe rc $?" >> $OUT/rc.txt
timeout 90 python3 $S/attn_timeline.py > $OUT/attn_timeline.txt 2>&1; echo "attn rc $?" >> $OUT/rc.txt
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=15 tests/adversarial tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py tests/test_kernel_dsa_sparse_attention.py tests/test_kernel_dsa_topk_indexer.py > $OUT/gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
