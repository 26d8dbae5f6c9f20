# Session 20: Nsight Compute on the large-T MoE kernels of solutions/fused_moe (one call, T = 14107 seed 100, clocks
# left alone): speed of light, warp stalls, scheduler, memory; then the tensor-pipe and DRAM/L2 counters by name.
source repro/runs/h200-20261207-s17-dev/lib.sh
S=repro/runs/h200-20261207-s20-dev
device_setup
K='regex:grouped_gemm|combine|gather|permute|route'
timeout 200 ncu --clock-control none --profile-from-start off -k "$K" --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section SourceCounters \
  python3 $S/ncu_call.py > $OUT/ncu_sections.txt 2>&1
mark "ncu sections rc $?"
timeout 120 ncu --clock-control none --profile-from-start off -k "$K" --metrics \
gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,\
dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,\
smsp__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
  python3 $S/ncu_call.py > $OUT/ncu_metrics.txt 2>&1
mark "ncu metrics rc $?"
cat $OUT/rc.txt; grep -E "grouped_gemm|combine|gather|permute|route|gmma|Duration|Throughput|dram__|lts__" $OUT/ncu_metrics.txt | cut -c1-160 | head -80
