# Session 17, for a short device budget: the wgmma unit test (gather tiles 4/5 exercise GATHER_A end to end), then
# (after prep.sh) the MoE repro of cand_ga_half if it passed, else of cand_half (both render the session 15/16 patch; see
# call_all.sh for the digest check against manifest.txt), then, if time is left, the A/B of that variant vs landed.
# SHORT=1: no peers (the floor probe still runs with the reference) and only the solution (no torch baseline): ~150 s instead of ~330 s.
T0=$(date +%s); left() { echo $(( ${DEADLINE:-585} - ($(date +%s) - T0) )); }
export FIB_SDK_CACHE=/tmp/fibcache AB_PER=${AB_PER:-8}
D=repro/runs/h200-20261207-s17-dev; R=repro/runs/h200-20261206-s16-dev
eval "$(python3 -m sdk env install --wheels .whl-moe 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/rc.txt
timeout ${WG_S:-100} python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe_wgmma.py > $OUT/wgmma_tests.txt 2>&1; rc=$?
echo "wgmma rc $rc at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt
W=cand_half; [ $rc = 0 ] && W=cand_ga_half
rm -rf solutions/fused_moe && cp -r $R/.variants/$W solutions/fused_moe && sed -i "s/fused_moe_fp8_sm90_$W/fused_moe_fp8_sm90/" solutions/fused_moe/solution/python/main.py
DIG=$(find solutions/fused_moe -type f -not -path '*__pycache__*' | sort | xargs sha256sum | sha256sum | cut -c1-16)
read -r _ C WANT <<< "$(grep "^$W " $D/manifest.txt)"
echo "variant $W digest $DIG want $WANT commit $C" >> $OUT/rc.txt
if [ "$DIG" = "$WANT" ]; then
  mkdir -p $OUT/tr; export FIB_SDK_COMMIT=$C
  timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official --definition moe --tag ${TAG:-repro} --settings repro/settings.toml --out $OUT --traces $OUT/tr ${SHORT:+--no-peers solutions/fused_moe} > $OUT/repro_log.txt 2>&1; echo "repro rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt
fi
rm -rf $R/.variants/cand_half $R/.variants/cand_ga_half   # the A/B: landed vs the solution in solutions/fused_moe
[ $(left) -gt 60 ] && timeout $(( $(left) - 5 )) python3 $R/moe_ab.py 1,100 11948,100 7,100 14107,100 > $OUT/moe_ab.txt 2>&1
cat $OUT/rc.txt; tail -3 $OUT/wgmma_tests.txt; tail -6 $OUT/repro_log.txt 2>/dev/null; grep -v Warn $OUT/moe_ab.txt 2>/dev/null | tail -5
