# Session 22, one device call for the indexer (repository root; checkout: branch s22-idx after prep.sh). Carry
# .whl-moe .official repro/runs/h200-20261207-s22-dev/.variants. Returns rc.txt (marks), ab.txt, tests.txt,
# repro_log.txt and the winner's results file and trace (tr/).
#  1. idx_ab.py: idx_main and the candidates of prep.sh, equal outputs (seeded + crafted ties) and interleaved spans
#     (abl_noselect: timed only).
#  2. The winner (if not idx_main), its exact sources checked against idx_manifest.txt: the indexer GPU tests,
#     then its repro (no peers), naming its commit.
source repro/runs/h200-20261207-s17-dev/lib.sh   # device_setup, left, mark, solution_digest
S=repro/runs/h200-20261207-s22-dev
device_setup
timeout ${AB_S:-200} python3 $S/idx_ab.py > $OUT/ab.txt 2>&1
mark "idx ab rc $?"
W=$(grep "^winner " $OUT/ab.txt | cut -d' ' -f2); mark "idx winner ${W:-none}"
if [ -n "$W" ] && [ "$W" != idx_main ] && [ $(left) -gt 60 ]; then
  rm -rf solutions/dsa_topk_indexer && cp -r $S/.variants/$W solutions/dsa_topk_indexer
  read -r _ C WANT <<< "$(grep "^$W " $S/idx_manifest.txt)"; DIG=$(solution_digest . dsa_topk_indexer)
  mark "idx winner $W at $C: digest $DIG want $WANT"
  if [ "$DIG" = "$WANT" ]; then
    timeout 90 python3 -m pytest -m gpu -q tests/test_kernel_dsa_topk_indexer.py > $OUT/tests.txt 2>&1
    TESTS=$?; mark "idx gpu tests rc $TESTS"
    mkdir -p $OUT/tr
    [ $TESTS = 0 ] && [ $(left) -gt ${REPRO_MIN:-260} ] && FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) \
      python3 -m sdk bench --definitions .official --definition indexer --tag repro --settings repro/settings.toml \
      --out $OUT --traces $OUT/tr --no-peers solutions/dsa_topk_indexer > $OUT/repro_log.txt 2>&1
    mark "idx repro rc $?"
  fi
fi
cat $OUT/rc.txt; grep -v "^ *idx_.* differs" $OUT/ab.txt | tail -20; tail -3 $OUT/tests.txt 2>/dev/null
grep -i "mean\|passed" $OUT/repro_log.txt 2>/dev/null | tail -6
