# Device call 2 (session 16): the MoE repro at the commit that lands the session-15/16 kernel changes.
eval "$(python3 -m sdk env install --wheels .whl-moe 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=${1:?commit}
mkdir -p $OUT/tr
timeout 500 python3 -m sdk bench --definitions .official --definition moe --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
cat $OUT/rc.txt; tail -40 $OUT/repro_log.txt
