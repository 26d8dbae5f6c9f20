# Session 17, for a short device budget (after prep.sh): the wgmma unit test, then the MoE repro of cand_ga_half if
# it passed, else of cand_half (lib.sh's repro_variant: digest checked against manifest.txt), then, if time is
# left, the A/B of that variant vs landed.
# SHORT=1: no peers (the floor probe still runs with the reference) and only the solution (no torch baseline):
# ~150 s instead of ~330 s.
source repro/runs/h200-20261207-s17-dev/lib.sh
device_setup
W=cand_half; wgmma_test ${WG_S:-100} && W=cand_ga_half
repro_variant $W ${SHORT:+--no-peers solutions/fused_moe}
rm -rf $R/.variants/cand_half $R/.variants/cand_ga_half   # the A/B: landed vs the solution in solutions/fused_moe
[ $(left) -gt 60 ] && timeout $(( $(left) - 5 )) python3 $R/moe_ab.py 1,100 11948,100 7,100 14107,100 > $OUT/moe_ab.txt 2>&1
cat $OUT/rc.txt; tail -3 $OUT/wgmma_tests.txt; tail -6 $OUT/repro_log.txt 2>/dev/null; grep -v Warn $OUT/moe_ab.txt 2>/dev/null | tail -5
