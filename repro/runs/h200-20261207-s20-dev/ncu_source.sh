# Session 20: where the large-T GEMMs stall, instruction by instruction (cand2, T = 14107 seed 100, clocks left
# alone): Nsight Compute's source counters (warp stall sampling per SASS line) for GEMM1 and GEMM2, as CSV.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
timeout $(( $(left) - 40 )) ncu --clock-control none --profile-from-start off -k regex:grouped_gemm -c 2 \
  --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats \
  -o $OUT/gemms python3 $S/ncu_call.py > $OUT/ncu_log.txt 2>&1
mark "ncu rc $?"
timeout 20 ncu -i $OUT/gemms.ncu-rep --page details > $OUT/gemm_details.txt 2>&1; mark "details rc $?"
timeout 15 ncu -i $OUT/gemms.ncu-rep --page source --csv --print-source sass > $OUT/gemm_sass.csv 2>&1; mark "source rc $?"
ls -la $OUT; cat $OUT/rc.txt; grep -i "stall\|barrier" $OUT/gemm_details.txt | head -20
