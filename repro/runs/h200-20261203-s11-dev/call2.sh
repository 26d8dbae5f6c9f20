# Throwaway device call (session 11): the one-pass MoE variant (.scratch/moe_onepass, session 7's kernel rebased)
# against 9d089e9's chain, its GPU tests, then the indexer timeline.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=9d089e9
timeout 130 python3 repro/runs/h200-20261203-s10-dev/moe_ab.py patch .scratch/moe_onepass > $OUT/ab_onepass_next.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
timeout 80 python3 repro/runs/h200-20261203-s10-dev/indexer_timeline.py > $OUT/indexer_timeline.txt 2>&1; echo "idx rc $?" >> $OUT/rc.txt
rm -rf solutions/fused_moe && cp -r .scratch/moe_onepass solutions/fused_moe
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py > $OUT/onepass_tests.txt 2>&1; echo "onepass tests rc $?" >> $OUT/rc.txt
