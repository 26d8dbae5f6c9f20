# Device call 3 (session 14): the gather-free one-pass MoE kernel (ONEPASS_T_MAX 16): its GPU tests, then the A/B
# against HEAD's solution with the new kernel's marks.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=8af2bb5+onepass16
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/test_kernel_fused_moe.py > $OUT/moe_tests.txt 2>&1; echo "moe tests rc $?" >> $OUT/rc.txt
timeout 300 python3 repro/runs/h200-20261204-s14-dev/onepass_ab.py > $OUT/onepass_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
