# Device call 2 (session 18, same warm H100; .variants holding landed only): landed vs cand on 10 cases, through s17
# call_all.sh (its repro was refused: the device-side digest of solutions/fused_moe differed from manifest.txt's).
AB_S=230 WG_S=1 AB_CASES="1,100 1,101 1,102 1,103 7,100 16,100 80,100 901,100 11948,100 14107,100" bash repro/runs/h200-20261207-s17-dev/call_all.sh
