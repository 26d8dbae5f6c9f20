# Device call 2 (session 14): the one-pass kernel's marks at T = 1 / 7 / 14 / 16, the large-T kernel split.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=8af2bb5
timeout 300 python3 repro/runs/h200-20261204-s14-dev/onepass_marks.py > $OUT/onepass_marks.txt 2>&1; echo "onepass rc $?" >> $OUT/rc.txt
timeout 120 python3 repro/runs/h200-20261204-s14-dev/moe_big_kernels.py > $OUT/moe_big_kernels.txt 2>&1; echo "big rc $?" >> $OUT/rc.txt
