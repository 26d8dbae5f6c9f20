# Throwaway device call (session 12): indexer ONE_WAVE 0 vs 1 on the shapes where the policy halves the cluster.
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache
timeout 200 python3 repro/runs/h200-20261203-s12-dev/indexer_ab.py > $OUT/indexer_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
