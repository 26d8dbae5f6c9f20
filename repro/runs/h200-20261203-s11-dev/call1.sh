# Throwaway device call (session 11) at 9d089e9 (wip-moe-s10-next.patch landed in the tree): MoE GPU tests, the A/B
# against the previous solution (.scratch/moe_landed = cd21646's), then the MoE repro bench (traces for evidence).
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=9d089e9
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py > $OUT/next_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
timeout 110 python3 repro/runs/h200-20261203-s10-dev/moe_ab.py patch .scratch/moe_landed > $OUT/ab_landed_next.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
mkdir -p $OUT/tr
timeout 340 python3 -m sdk bench --definitions .official --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
