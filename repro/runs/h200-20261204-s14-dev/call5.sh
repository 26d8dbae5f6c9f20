# Device call 5 (session 14): the MoE repro at a9386bb (one pass up to T = 16).
eval "$(python3 -m sdk env install --wheels .whl-moe 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=a9386bb
mkdir -p $OUT/tr
timeout 560 python3 -m sdk bench --definitions .official --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
