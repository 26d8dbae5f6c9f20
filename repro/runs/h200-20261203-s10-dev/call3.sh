# Throwaway device call (session 10): the MoE's GPU tests on EARLY_WEIGHTS=1, then the A/B against EARLY_WEIGHTS=0.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=5dfc084+early-weights
timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=8 tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py > $OUT/moe_gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
timeout 250 python3 repro/runs/h200-20261203-s10-dev/moe_ab.py > $OUT/moe_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
