# Throwaway device call (session 13): the attention repro bench of the one-cluster kernel (the evidence for submit).
eval "$(python3 -m sdk env install --wheels .whl-attn 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=${COMMIT:-unset}
mkdir -p $OUT/tr
timeout 400 python3 -m sdk bench --definitions .official --definition attention --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr > $OUT/repro_log.txt 2>&1; echo "repro rc $?" >> $OUT/rc.txt
