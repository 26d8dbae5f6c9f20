# Throwaway device call (session 12) at 4eb396d + the one-pass MoE (wip-moe-onepass-s10.patch, the shared-memory
# counts/offsets/row weights now read generically: load_l2_or_shared): MoE GPU tests (ONEPASS_T_MAX=16 in the tree),
# then the A/B against the same templates with ONEPASS_T_MAX=0 (.scratch/moe_nopass = the landed chain).
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=4eb396d+onepass
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=8 tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py > $OUT/moe_gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
timeout 200 python3 repro/runs/h200-20261203-s10-dev/moe_ab.py patch .scratch/moe_nopass > $OUT/ab_onepass.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
