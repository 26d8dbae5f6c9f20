# Session 22, one device call for the indexer (repository root; checkout: branch s22-idx after prep.sh). Carry
# .whl-moe .official and each variants folder. Returns rc.txt (marks), ab.txt, tests.txt, repro_log.txt and the
# winner's results file and trace (tr/).
#  1. idx_ab.py: idx_main and the candidates in AB_VARIANTS (default: this folder's .variants; folders separated by
#     ":"), equal outputs (seeded + crafted ties) and interleaved spans (abl_noselect: timed only).
#  2. The winner (if not idx_main), its exact sources checked against the idx_manifest.txt beside its variants
#     folder: the indexer GPU tests, then its repro (no peers), naming its commit.
source repro/runs/h200-20261207-s17-dev/lib.sh   # device_setup, left, mark, winner_repro
S=repro/runs/h200-20261207-s22-dev
export AB_VARIANTS=${AB_VARIANTS:-$S/.variants}
device_setup
timeout ${AB_S:-200} python3 $S/idx_ab.py > $OUT/ab.txt 2>&1
mark "idx ab rc $?"
W=$(grep "^winner " $OUT/ab.txt | cut -d' ' -f2); mark "idx winner ${W:-none}"
for V in ${AB_VARIANTS//:/ }; do [ -n "$W" ] && [ -d $V/$W ] && break; done   # the first folder holding it
[ -n "$W" ] && [ "$W" != idx_main ] && [ $(left) -gt 60 ] && REPRO_MIN=${REPRO_MIN:-260} winner_repro $W \
  $(dirname $V)/idx_manifest.txt $V/$W dsa_topk_indexer tests/test_kernel_dsa_topk_indexer.py indexer
cat $OUT/rc.txt; grep -v "^ *idx_.* differs" $OUT/ab.txt | tail -20; tail -3 $OUT/tests.txt 2>/dev/null
grep -i "mean\|passed" $OUT/repro_log.txt 2>/dev/null | tail -6
