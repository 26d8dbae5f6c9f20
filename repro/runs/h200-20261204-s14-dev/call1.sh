# Device call 1 (session 14): sustained-loop FP8 and MoE spans, with nvidia-smi clocks/power sampled meanwhile.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=8af2bb5
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 50 > $OUT/smi.csv 2>&1 &
SMI=$!
timeout 420 python3 repro/runs/h200-20261204-s14-dev/moe_sustained.py > $OUT/moe_sustained.txt 2>&1; echo "sustained rc $?" >> $OUT/rc.txt
kill $SMI
