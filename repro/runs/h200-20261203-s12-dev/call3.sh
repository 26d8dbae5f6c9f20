# Throwaway device call (session 12): the indexer with its entry loads issued before seq_len is back (q, weights,
# the first pages' table entries: pages dealt round-robin over the cluster), rank 0's id translation from a shared
# copy of the block table, and ONE_WAVE = 1 (fewer CTAs per row while the grid would not be resident at once):
# its GPU tests, the timeline (marks shifted: mark 0 now follows the early loads), then the indexer repro bench.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=6dbc0ca+indexer-entry
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_kernel_dsa_topk_indexer.py > $OUT/indexer_tests.txt 2>&1; rc=$?; echo "tests rc $rc" >> $OUT/rc.txt
[ $rc -eq 0 ] || exit 0
timeout 50 python3 repro/runs/h200-20261203-s10-dev/indexer_timeline.py > $OUT/indexer_timeline.txt 2>&1; echo "timeline rc $?" >> $OUT/rc.txt
mkdir -p $OUT/tr
timeout 430 python3 -m sdk bench --definitions .official --definition indexer --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
