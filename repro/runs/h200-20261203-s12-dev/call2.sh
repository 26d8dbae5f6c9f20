# Throwaway device call (session 12): the MoE repro bench with the one-pass kernel at T = 1 (ONEPASS_T_MAX = 1: call1's
# A/B showed it 3.8x faster with no local expert, +2% / -6% with one / two, slower at T = 7 and 16).
eval "$(python3 -m sdk env install 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=4eb396d+onepass-t1
mkdir -p $OUT/tr
timeout 420 python3 -m sdk bench --definitions .official --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
