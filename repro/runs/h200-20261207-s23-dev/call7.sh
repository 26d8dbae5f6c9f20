# Session 23, one device call for the indexer (repository root; checkout: branch s23-idx after prep.sh). Carry
# .whl-moe .official repro/runs/h200-20261207-s22-dev/.variants repro/runs/h200-20261207-s23-dev/.variants.
# Returns rc.txt (marks), ab.txt, tests.txt, repro_log.txt and the winner's results file and trace (tr/).
#  1. Session 22's idx_ab.py over both sessions' variants (idx_main, s22's idx_i1 / i3g / i6 / i6g, abl_noselect,
#     s23's idx_w*): equal outputs (seeded + crafted ties) and interleaved spans.
#  2. The winner (if not idx_main), its exact sources checked against its session's idx_manifest.txt: the indexer
#     GPU tests, then its repro (no peers), naming its commit.
source repro/runs/h200-20261207-s17-dev/lib.sh   # device_setup, left, mark, winner_repro
S=repro/runs/h200-20261207-s23-dev; S22=repro/runs/h200-20261207-s22-dev
device_setup
AB_VARIANTS=$S/.variants:$S22/.variants timeout ${AB_S:-240} python3 $S22/idx_ab.py > $OUT/ab.txt 2>&1
mark "idx ab rc $?"
W=$(grep "^winner " $OUT/ab.txt | cut -d' ' -f2); mark "idx winner ${W:-none}"
M=$S; [ -d $S/.variants/$W ] || M=$S22
[ -n "$W" ] && [ "$W" != idx_main ] && [ $(left) -gt 60 ] && REPRO_MIN=${REPRO_MIN:-260} winner_repro $W \
  $M/idx_manifest.txt $M/.variants/$W dsa_topk_indexer tests/test_kernel_dsa_topk_indexer.py indexer
cat $OUT/rc.txt; grep -v "^ *idx_.* differs" $OUT/ab.txt | tail -20; tail -3 $OUT/tests.txt 2>/dev/null
grep -i "mean\|passed" $OUT/repro_log.txt 2>/dev/null | tail -6
