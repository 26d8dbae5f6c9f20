# Last device call: gate-only passes of the baselines the earlier run lost, then benches with prebuilt peers only.
source tools/device_env.sh
export FIB_SDK_COMMIT=4a40db403c23959386b548be3b3cdd56c40d42df
mkdir -p $OUT/traces  # gate --traces needs its folder to exist
B="python3 -m sdk bench --timeout 240 --no-aa --out $OUT --traces $OUT/traces"
timeout 60 python3 -m sdk gate solutions/dsa_topk_indexer_torch_baseline --traces $OUT/traces/gate_dsa_topk_indexer_torch_baseline.jsonl > $OUT/gate_idx.log 2>&1; echo "gate idx rc=$?"; tail -1 $OUT/gate_idx.log
timeout 45 python3 -m sdk gate solutions/moe_torch_baseline --workloads 74d7ff04 --workloads 4822167c --workloads 81955b1e --workloads 76010cb4 --workloads fc378037 --workloads f7d6ac7c --traces $OUT/traces/gate_moe_torch_baseline.jsonl > $OUT/gate_moe.log 2>&1; echo "gate moe rc=$?"; tail -1 $OUT/gate_moe.log
timeout 100 $B solutions/dsa_sparse_attention_torch_baseline solutions/dsa_sparse_attention solutions/dsa_sparse_attention_fused --peers sgl-flash-mla --tag attn > $OUT/b_attn.log 2>&1; echo "attn rc=$?"; grep -v "^\[" $OUT/b_attn.log | tail -4 | cut -c1-200
timeout 80 $B solutions/fused_moe --peers deepgemm --reference-iters 5 --tag moe > $OUT/b_moe.log 2>&1; echo "moe rc=$?"; grep -v "^\[" $OUT/b_moe.log | tail -4 | cut -c1-200
timeout 60 $B solutions/dsa_topk_indexer_torch_baseline solutions/dsa_topk_indexer --stride 8 --peers fast_topk_transform --tag idx > $OUT/b_idx.log 2>&1; echo "idx rc=$?"; grep -v "^\[" $OUT/b_idx.log | tail -4 | cut -c1-200
cat $OUT/b_*.log $OUT/gate_*.log > $OUT/all.log; rm $OUT/b_*.log $OUT/gate_*.log; tar czf $OUT/traces.tgz -C $OUT traces && rm -rf $OUT/traces
