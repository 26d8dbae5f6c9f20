# Session 19 device call 1, after prep.sh (checkout: the s16 candidate + wide row tiles (off) + weight scales through
# the ring, commits.txt's "cand"; .variants: landed = main, c_prev = the s16 candidate, c_wide = cand rendered with
# WIDE_128 = 1): (1) the A/B (judge-like spans; rel L2 vs the official reference) of landed / c_prev / cand / c_wide;
# (2) wide_check.py (the wgmma GPU test on tiles 0 and 6: correctness vs fp32 torch, per-GEMM TFLOP/s side by side);
# (3) per-kernel times at large T with the time left. Carry .whl-base .whl-moe .official and the .variants folder.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s19-dev
device_setup
timeout $(( $(left) > 400 ? 240 : $(left) - 60 )) python3 $R/moe_ab.py 14107,100 11948,100 7,100 1,101 901,100 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
[ $(left) -gt 100 ] && timeout $(( $(left) > 250 ? 200 : $(left) - 20 )) python3 $S/wide_check.py > $OUT/wide_check.txt 2>&1
mark "wide_check rc $?"
[ $(left) -gt 40 ] && timeout $(( $(left) - 3 )) python3 $S/kernels.py 14107,100 11948,101 > $OUT/kernels.txt 2>&1
mark "kernels rc $?"
cat $OUT/rc.txt; grep -i "TFLOP\|passed\|^T=" $OUT/wide_check.txt | tail -30; grep "^T=" $OUT/moe_ab.txt
