# Session 17 device call 1 (repository root = branch s17-cand: wip-moe-s15-s16.patch applied): the wgmma unit
# test (gather tiles 4/5 of GATHER_A), then session 16's call1.sh (the solution's GPU tests + the A/B of landed /
# cand / cand_half / cand_ga_half, .variants rendered by make_variants.py). Carry .whl-base, .whl-moe, .official
# and repro/runs/h200-20261206-s16-dev/.variants; call 2 (the repro of the winner's branch) follows on the warm machine.
export FIB_SDK_CACHE=/tmp/fibcache
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
timeout ${WG_S:-120} python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe_wgmma.py > $OUT/wgmma_tests.txt 2>&1; echo "wgmma rc $?" >> $OUT/rc.txt
tail -3 $OUT/wgmma_tests.txt
bash repro/runs/h200-20261206-s16-dev/call1.sh
