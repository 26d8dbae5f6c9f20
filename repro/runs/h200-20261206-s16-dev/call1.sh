# Device call 1 (session 16): the session-15 working tree's MoE changes + GATHER_A = 0 (rendered into
# solutions/fused_moe) under the solution's GPU tests, then A/B against the landed solution (.variants/landed),
# cand + idle half tiles (.variants/cand_half) and cand + half + GATHER_A = 1 (.variants/cand_ga_half).
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache
R=repro/runs/h200-20261206-s16-dev
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/smi.txt
for v in landed cand_half cand_ga_half; do (timeout 300 python3 $R/moe_ab.py prebuild $v > $OUT/prebuild_$v.txt 2>&1 &); done
timeout 170 python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe.py > $OUT/gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
timeout 260 python3 $R/moe_ab.py > $OUT/moe_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
cat $OUT/rc.txt; grep -E "passed|failed|Error|error" $OUT/gpu_tests.txt | tail -5; cat $OUT/prebuild_*.txt | tail -5; cat $OUT/moe_ab.txt | grep -v Warn | tail -25
