# Session 18 device call 3 (run as SHORT=1 DEADLINE=325: out3/; after prep.sh on a clean main): the repro of cand
# (the checkout, branch s18-cand; commits.txt names its commit) first, as it is the A/B-measured candidate, then
# the A/B of landed / cand / c_oldroute / c_nodefer if 100 s are left (its builds come after the repro, so no
# compile competes with the repro's timed calls). SHORT=1: the repro without peers. Carry .whl-base .whl-moe
# .official and repro/runs/h200-20261206-s16-dev/.variants.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s18-dev
device_setup
find solutions/fused_moe -type f -not -path '*__pycache__*' | LC_ALL=C sort | xargs sha256sum > $OUT/files.txt
mkdir -p $OUT/tr; C=$(grep "^cand " $S/commits.txt | cut -d' ' -f2); mark "repro of cand at $C"
FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official --definition moe \
  --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr ${SHORT:+--no-peers} solutions/fused_moe > $OUT/repro_log.txt 2>&1
mark "repro rc $?"
[ $(left) -gt 100 ] && timeout $(( $(left) - 3 )) python3 $R/moe_ab.py 14107,100 11948,100 1,101 7,100 > $OUT/moe_ab.txt 2>&1
mark "ab rc $?"
cat $OUT/rc.txt; tail -5 $OUT/repro_log.txt; grep "^T=" $OUT/moe_ab.txt
