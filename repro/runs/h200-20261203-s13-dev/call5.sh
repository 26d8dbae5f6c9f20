# Throwaway device call (session 13): the grid-barrier attention kernel's neighbouring template points (attn_ab.py
# grid) and the MoE per-kernel timeline at small T and T = 11948 (moe_kernels.py).
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=881407e
timeout 200 python3 repro/runs/h200-20261203-s13-dev/attn_ab.py grid > $OUT/attn_ab_grid.txt 2>&1; echo "attn ab grid rc $?" >> $OUT/rc.txt
timeout 150 python3 repro/runs/h200-20261203-s13-dev/moe_kernels.py > $OUT/moe_kernels.txt 2>&1; echo "moe kernels rc $?" >> $OUT/rc.txt
