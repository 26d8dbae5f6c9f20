# Session 20 device call 1 (checkout: branch s20-cand = s19's candidate + WIDE_128 = 1 + the combine's batched
# loads, commits.txt's "cand"; .variants: landed = main, c_wide = s19's candidate with WIDE_128 = 1): (1) the A/B
# of landed / c_wide / cand (judge-like spans, rel L2 vs the official reference); (2) per-kernel times at large T;
# (3) the MoE repro of cand (with peers unless SHORT=1) with the time left. Carry .whl-base .whl-moe .official.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
timeout 150 python3 $R/moe_ab.py 14107,100 11948,100 901,100 7,100 1,101 1,102 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
timeout 40 python3 repro/runs/h200-20261207-s19-dev/kernels.py 14107,100 > $OUT/kernels.txt 2>&1
mark "kernels rc $?"
find solutions/fused_moe -type f -not -path '*__pycache__*' | LC_ALL=C sort | xargs sha256sum > $OUT/files.txt
mkdir -p $OUT/tr; C=$(grep "^cand " $S/commits.txt | cut -d' ' -f2); mark "repro of cand at $C"
FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official --definition moe \
  --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr ${SHORT:+--no-peers} solutions/fused_moe > $OUT/repro_log.txt 2>&1
mark "repro rc $?"
cat $OUT/rc.txt; grep "^T=" $OUT/moe_ab.txt; tail -4 $OUT/kernels.txt; tail -5 $OUT/repro_log.txt
