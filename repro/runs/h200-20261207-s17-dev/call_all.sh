# Session 17, one device call (the machine is hard to get: do everything in one): the wgmma unit test, a short A/B
# of landed / cand / cand_half / cand_ga_half (moe_ab.py), then the MoE repro of the winner (geomean of latency
# ratios vs landed over the A/B cases; a variant whose rel L2 exceeds landed's by > 1e-3 is out) if time is left.
# The winner's rendered copy replaces solutions/fused_moe; its file digest must equal manifest.txt's for its branch,
# whose commit the results file then names. Carry .whl-base .whl-moe .official and the s16 .variants folder.
# Run prep.sh first. At most 8 files come back from $OUT: this writes 8 (rc, prebuild, wgmma, A/B, repro log,
# results, two trace files).
source repro/runs/h200-20261207-s17-dev/lib.sh
device_setup
for v in landed cand_half cand_ga_half; do (timeout 240 python3 $R/moe_ab.py prebuild $v > /tmp/prebuild_$v.txt 2>&1 &); done
wgmma_test ${WG_S:-80}
timeout ${AB_S:-130} python3 $R/moe_ab.py ${AB_CASES:-1,100 11948,100 7,100 14107,100 32,100} > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
W=$(python3 $D/pick.py $OUT/moe_ab.txt); echo "winner: $W" >> $OUT/rc.txt
[ -n "$W" ] && [ "$W" != landed ] && repro_variant $W
cat /tmp/prebuild_*.txt > $OUT/prebuild.txt; cat $OUT/rc.txt; tail -3 $OUT/wgmma_tests.txt; grep -v Warn $OUT/moe_ab.txt | tail -12; tail -8 $OUT/repro_log.txt 2>/dev/null
