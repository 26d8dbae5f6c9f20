# Session 17, one device call (the machine is hard to get: do everything in one): the wgmma unit test, a short A/B
# of landed / cand / cand_half / cand_ga_half (moe_ab.py), then the MoE repro of the winner (geomean of latency
# ratios vs landed over the A/B cases; a variant whose rel L2 exceeds landed's by > 1e-3 is out) if time is left.
# The winner's rendered copy replaces solutions/fused_moe; its file digest must equal manifest.txt's for its branch,
# whose commit the results file then names. Carry .whl-base .whl-moe .official and the s16 .variants folder.
# Run prep.sh first. At most 8 files come back from $OUT: this writes 8 (rc, prebuild, wgmma, A/B, repro log,
# results, two trace files).
T0=$(date +%s); left() { echo $(( ${DEADLINE:-585} - ($(date +%s) - T0) )); }
export FIB_SDK_CACHE=/tmp/fibcache AB_PER=${AB_PER:-8}
D=repro/runs/h200-20261207-s17-dev; R=repro/runs/h200-20261206-s16-dev
eval "$(python3 -m sdk env install --wheels .whl-moe 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/rc.txt
for v in landed cand_half cand_ga_half; do (timeout 240 python3 $R/moe_ab.py prebuild $v > /tmp/prebuild_$v.txt 2>&1 &); done
timeout ${WG_S:-80} python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe_wgmma.py > $OUT/wgmma_tests.txt 2>&1; echo "wgmma rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt
timeout ${AB_S:-130} python3 $R/moe_ab.py ${AB_CASES:-1,100 11948,100 7,100 14107,100 32,100} > $OUT/moe_ab.txt 2>&1; echo "ab rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt
W=$(python3 $D/pick.py $OUT/moe_ab.txt); echo "winner: $W" | tee -a $OUT/rc.txt
if [ -n "$W" ] && [ "$W" != landed ]; then
  if [ "$W" != cand ]; then rm -rf solutions/fused_moe && cp -r $R/.variants/$W solutions/fused_moe && sed -i "s/fused_moe_fp8_sm90_$W/fused_moe_fp8_sm90/" solutions/fused_moe/solution/python/main.py; fi
  DIG=$(find solutions/fused_moe -type f -not -path '*__pycache__*' | sort | xargs sha256sum | sha256sum | cut -c1-16)
  read -r _ C WANT <<< "$(grep "^$W " $D/manifest.txt)"
  echo "digest $DIG want $WANT commit $C" >> $OUT/rc.txt
  if [ "$DIG" = "$WANT" ]; then
    mkdir -p $OUT/tr; export FIB_SDK_COMMIT=$C
    timeout $(left) python3 -m sdk bench --definitions .official --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt
  fi
fi
cat /tmp/prebuild_*.txt > $OUT/prebuild.txt; cat $OUT/rc.txt; tail -3 $OUT/wgmma_tests.txt; grep -v Warn $OUT/moe_ab.txt | tail -12; tail -8 $OUT/repro_log.txt 2>/dev/null
