# Device call: the full bench (gate + timing + peers + floors) of every solution on all contest workloads.
# Baselines come first in each definition so the reference and peers are timed with a solution known to pass.
source tools/device_env.sh
timeout ${BENCH_TIMEOUT:-560} python3 -m sdk bench ${BENCH_SOLUTIONS:-solutions/dsa_topk_indexer_torch_baseline \
  solutions/dsa_topk_indexer solutions/moe_torch_baseline solutions/fused_moe \
  solutions/dsa_sparse_attention_torch_baseline solutions/dsa_sparse_attention solutions/dsa_sparse_attention_fused} \
  --aa-every 8 --timeout 150 --out $OUT --tag ${BENCH_TAG:-repro} --traces $OUT/traces > $OUT/bench.log 2>&1
echo "bench rc=$?"
grep -v "^\[" $OUT/bench.log | tail -40 | cut -c1-220
grep -c "PASSED" $OUT/bench.log; grep "^\[" $OUT/bench.log | grep -v PASSED | head -20 | cut -c1-250
tar czf $OUT/traces.tgz -C $OUT traces && rm -rf $OUT/traces
