# Session 20's device call 3, not run (no device time was left): after prep.sh (checkout: branch s20-pipe,
# commits.txt's "cand3" = main + GEMM2's 128-column tiles with two partial sums in flight, WIDE_128 = 2; .variants:
# c2 = main). (1) gemm_check.py: row tiles 0 / 1 / 6 vs fp32 torch with cold-L2 TFLOP/s (tile 0's GEMM2 is the
# pipelined one: 861 TFLOP/s in out3 before it), the whole MoE vs the reference; (2) the A/B of c2 / cand3 (rel L2 vs
# the official reference, judge-like spans); (3) per-kernel times at T = 14107. About 300 s with the builds. Carry
# .whl-base .whl-moe .official and repro/runs/h200-20261206-s16-dev/.variants.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
timeout 120 python3 $S/gemm_check.py > $OUT/gemm_check.txt 2>&1
mark "gemm_check rc $?"
timeout $(( $(left) > 200 ? 150 : $(left) - 25 )) python3 $R/moe_ab.py 14107,100 11948,100 901,100 80,100 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
[ $(left) -gt 12 ] && timeout $(( $(left) - 2 )) python3 repro/runs/h200-20261207-s19-dev/kernels.py 14107,100 > $OUT/kernels.txt 2>&1
mark "kernels rc $?"
cat $OUT/rc.txt; grep -i "TFLOP\|passed\|FAIL" $OUT/gemm_check.txt | tail -12; grep "^T=" $OUT/moe_ab.txt; tail -8 $OUT/kernels.txt
