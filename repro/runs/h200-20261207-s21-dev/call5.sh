# Session 21, one device call for both kernels (repository root; checkout: branch s21-both = s20-pipe's cand5 merged
# with s21-attn's tip). Carry .whl-base .whl-moe .official repro/runs/h200-20261206-s16-dev/.variants
# repro/runs/h200-20261207-s21-dev/.variants. Returns 8 files: rc.txt (marks, pick's reasons), ab.txt (both A/Bs),
# tests.txt, repro_log.txt, and each repro's results file and trace.
#  1. MoE A/B of c2 (main) / c3 / c4 / cand (cand5) at T = 14107, 11948, 901, 80; pick.py names the winner.
#  2. Attention A/B (attn_ab.py) of five renders at N = 1, 2, 6, 7, 8; it names the winner.
#  3. The MoE repro (no peers) of its winner's exact sources (manifest.txt digest), if not c2.
#  4. The attention winner's GPU tests, then its repro (no peers), if not attn_main and time is left.
# ONLY=moe or ONLY=attn runs that kernel's steps alone (a short call).
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s21-dev
device_setup
[ "${ONLY:-moe}" = moe ] && timeout 180 python3 $R/moe_ab.py 14107,100 11948,100 901,100 80,100 > $OUT/ab.txt 2>&1
mark "moe ab rc $?"
W=$(python3 $S/pick.py $OUT/ab.txt 2>> $OUT/rc.txt); mark "moe winner ${W:-none}"
[ "${ONLY:-attn}" = attn ] && timeout 170 python3 $S/attn_ab.py > $OUT/attn_ab.tmp 2>&1
mark "attn ab rc $?"; cat $OUT/attn_ab.tmp >> $OUT/ab.txt 2>/dev/null
A=$(grep "^winner " $OUT/attn_ab.tmp | cut -d' ' -f2); rm -f $OUT/attn_ab.tmp; mark "attn winner ${A:-none}"
mkdir -p $OUT/tr
if [ -n "$W" ] && [ "$W" != c2 ] && [ $(left) -gt 150 ]; then
  if [ "$W" != cand ]; then
    rm -rf solutions/fused_moe && cp -r $R/.variants/$W solutions/fused_moe &&
      sed -i "s/fused_moe_fp8_sm90_$W/fused_moe_fp8_sm90/" solutions/fused_moe/solution/python/main.py
  fi
  read -r _ C WANT <<< "$(grep "^$W " $S/manifest.txt)"; DIG=$(solution_digest . fused_moe)
  mark "moe repro of $W at $C: digest $DIG want $WANT"
  [ "$DIG" = "$WANT" ] && FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official \
    --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr --no-peers \
    solutions/fused_moe >> $OUT/repro_log.txt 2>&1
  mark "moe repro rc $?"
fi
[ -n "$A" ] && [ "$A" != attn_main ] && [ $(left) -gt 160 ] && winner_repro $A $S/attn_manifest.txt \
  $S/.variants/$A dsa_sparse_attention tests/test_kernel_dsa_sparse_attention.py attention
cat $OUT/rc.txt; grep "^T=\|^ *[0-9] \|^geomean\|^winner\|^built" $OUT/ab.txt; tail -3 $OUT/tests.txt 2>/dev/null
grep -i "mean\|passed" $OUT/repro_log.txt 2>/dev/null | tail -6
