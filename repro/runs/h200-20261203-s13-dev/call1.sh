# Throwaway device call (session 13): the indexer rendered with ONE_WAVE = 0 (17c0a1c): its GPU tests, then the
# indexer repro bench (the evidence for submit).
eval "$(python3 -m sdk env install --wheels .whl-idx 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=17c0a1c
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_kernel_dsa_topk_indexer.py > $OUT/indexer_tests.txt 2>&1; rc=$?; echo "tests rc $rc" >> $OUT/rc.txt
[ $rc -eq 0 ] || exit 0
mkdir -p $OUT/tr
timeout 440 python3 -m sdk bench --definitions .official --definition indexer --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
