# Prepared in session 14 for the next session's first MoE device call (run make_variants.py here first):
# GPU tests of the rw_half variant rendered into solutions/ would be the real gate; this call only A/Bs.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache
timeout 420 python3 repro/runs/h200-20261204-s14-dev/moe_variants_ab.py > $OUT/moe_variants_ab.txt 2>&1; echo "ab rc $?" >> $OUT/rc.txt
