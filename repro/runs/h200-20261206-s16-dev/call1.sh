# Device call 1 (session 16, for the next session): the patched solution (wip-moe-s15-s16.patch applied and
# make_variants.py run, so solutions/fused_moe is the candidate) under its GPU tests, then A/B against the landed
# solution (.variants/landed), cand + idle half tiles (.variants/cand_half) and cand + half + GATHER_A = 1
# (.variants/cand_ga_half). Carry .whl-base and the .variants folder. Short form for little device time:
#   TEST_S=120 AB_S=150 AB_PER=8 AB_CASES="1,100 1,101 7,100 32,100 901,100 11948,100 14107,100" bash call1.sh
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache AB_PER=${AB_PER:-15}
R=repro/runs/h200-20261206-s16-dev
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/smi.txt
for v in landed cand_half cand_ga_half; do (timeout 300 python3 $R/moe_ab.py prebuild $v > $OUT/prebuild_$v.txt 2>&1 &); done
timeout ${TEST_S:-170} python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe.py > $OUT/gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
timeout ${AB_S:-260} python3 $R/moe_ab.py $AB_CASES > $OUT/moe_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
cat $OUT/rc.txt; grep -E "passed|failed|Error|error" $OUT/gpu_tests.txt | tail -5; cat $OUT/prebuild_*.txt | tail -5; cat $OUT/moe_ab.txt | grep -v Warn | tail -25
