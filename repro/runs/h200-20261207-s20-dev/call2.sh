# Session 20 device call 2 (checkout: branch s20-cand2, commits.txt's "cand2": s20-cand + GEMM2's bf16 rows through
# a shared-memory slab; .variants: landed = main before this session, c20 = s20-cand): (1) gemm_check.py (row tiles
# 0 / 1 / 6 vs fp32 torch, whole MoE vs the reference); (2) the A/B of landed / c20 / cand2; (3) per-kernel times at
# T = 14107; (4) if (1) passed, the MoE repro of cand2 (SHORT=1: no peers); (5) ncu.sh's profile with the time left.
# Carry .whl-base .whl-moe .official and repro/runs/h200-20261206-s16-dev/.variants.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
timeout 120 python3 $S/gemm_check.py > $OUT/gemm_check.txt 2>&1; CHECK=$?
mark "gemm_check rc $CHECK"
timeout 150 python3 $R/moe_ab.py 14107,100 11948,100 901,100 80,100 7,100 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
timeout 40 python3 repro/runs/h200-20261207-s19-dev/kernels.py 14107,100 > $OUT/kernels.txt 2>&1
mark "kernels rc $?"
if [ $CHECK = 0 ] && [ $(left) -gt 200 ]; then
  mkdir -p $OUT/tr; C=$(grep "^cand2 " $S/commits.txt | cut -d' ' -f2); mark "repro of cand2 at $C"
  FIB_SDK_COMMIT=$C timeout $(( $(left) - 60 )) python3 -m sdk bench --definitions .official --definition moe \
    --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr --no-peers solutions/fused_moe > $OUT/repro_log.txt 2>&1
  mark "repro rc $?"
fi
K='regex:grouped_gemm|combine|gather'
[ $(left) -gt 50 ] && timeout $(( $(left) - 10 )) ncu --clock-control none --profile-from-start off -k "$K" \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  python3 $S/ncu_call.py > $OUT/ncu_sections.txt 2>&1
mark "ncu rc $?"
cat $OUT/rc.txt; grep -i "TFLOP\|passed\|FAIL" $OUT/gemm_check.txt | tail -12; grep "^T=" $OUT/moe_ab.txt; tail -4 $OUT/kernels.txt
tail -3 $OUT/repro_log.txt 2>/dev/null
