# Device call 1, short form (session 16, little device time left): call1.sh with a capped A/B.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache
R=repro/runs/h200-20261206-s16-dev
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/smi.txt
for v in landed cand_half cand_ga_half; do (timeout 200 python3 $R/moe_ab.py prebuild $v > $OUT/prebuild_$v.txt 2>&1 &); done
timeout 120 python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe.py > $OUT/gpu_tests.txt 2>&1; echo "tests rc $?" >> $OUT/rc.txt
AB_PER=8 timeout 150 python3 $R/moe_ab.py 1,100 1,101 7,100 32,100 901,100 11948,100 14107,100 > $OUT/moe_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
cat $OUT/rc.txt; grep -E "passed|failed|Error|error" $OUT/gpu_tests.txt | tail -5; cat $OUT/moe_ab.txt | grep -v Warn | tail -12
