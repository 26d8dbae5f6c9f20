# Session 20's device call 3, not run (no device time was left). After prep.sh: the checkout is "cand4" (commits.txt);
# .variants: c2 = main, c3 = cand3 (GEMM2's 128-column tiles with two sums in flight; GEMM1 wide), c4w1 = cand4 with
# both GEMMs wide (quarters). (1) gemm_check.py: row tiles 0 / 1 / 6 vs fp32 torch with cold-L2 TFLOP/s (before: tile
# 0 GEMM1 826 / GEMM2 861, tile 6 992 / 261 TFLOP/s, out3), the whole MoE vs the reference; (2) the A/B of c2 / c3 /
# c4w1 / cand4 (rel L2 vs the official reference, judge-like spans); (3) per-kernel times at T = 14107. About 400 s
# with the builds. Carry .whl-base .whl-moe .official and repro/runs/h200-20261206-s16-dev/.variants.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
timeout 120 python3 $S/gemm_check.py > $OUT/gemm_check.txt 2>&1
mark "gemm_check rc $?"
timeout $(( $(left) > 260 ? 200 : $(left) - 50 )) python3 $R/moe_ab.py 14107,100 11948,100 901,100 80,100 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
[ $(left) -gt 12 ] && timeout $(( $(left) - 2 )) python3 repro/runs/h200-20261207-s19-dev/kernels.py 14107,100 > $OUT/kernels.txt 2>&1
mark "kernels rc $?"
cat $OUT/rc.txt; grep -i "TFLOP\|passed\|FAIL" $OUT/gemm_check.txt | tail -12; grep "^T=" $OUT/moe_ab.txt; tail -8 $OUT/kernels.txt
