# Throwaway device call (session 13): timelines. The one-cluster attention kernel (attn_cluster_timeline.py), the
# grid-barrier kernel (s9's attn_timeline.py, on the refactored tile math), and s9's MoE timeline (small T).
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=881407e
timeout 150 python3 repro/runs/h200-20261203-s13-dev/attn_cluster_timeline.py > $OUT/attn_cluster_timeline.txt 2>&1; echo "cluster timeline rc $?" >> $OUT/rc.txt
timeout 90 python3 repro/runs/h200-20261203-s9-dev/attn_timeline.py > $OUT/attn_grid_timeline.txt 2>&1; echo "grid timeline rc $?" >> $OUT/rc.txt
timeout 150 python3 repro/runs/h200-20261203-s9-dev/moe_timeline.py > $OUT/moe_timeline.txt 2>&1; echo "moe timeline rc $?" >> $OUT/rc.txt
