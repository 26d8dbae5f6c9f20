# Device call (offline, no network, ~10 min): the agent loop's tools on the H200, results under $OUT.
#  1. a scripted model (tests/fixtures/agent/scripts/indexer_emit_threads.json, served in process: no litellm
#     needed) renders the committed indexer point (c0001), then patches its CUDA launch file (c0002: the short-row
#     id-translation kernel with 512 threads), compiles, gates, benches and finishes through the tools; the loop
#     gates and times both on 3 workloads (2 short-row, 1 long), so c0002's speedup vs parent is the patch's effect.
#  2. the offline attention demo of h200_call1.sh, re-recorded with its calls/ so that it replays.
source tools/device_env.sh
timeout 420 python3 -m sdk regenerate dsa_topk_indexer_fp8_h64_d128_topk2048_ps64 --backend scripted \
  --script tests/fixtures/agent/scripts/indexer_emit_threads.json --max-iters 2 --trials 2 \
  --workloads 30cecff1,7f03b670,5db1b172 --run-dir $OUT/agent-tools-indexer > $OUT/agent-tools-indexer.log 2>&1
echo "scripted rc=$?"; tail -8 $OUT/agent-tools-indexer.log
mkdir -p $OUT/agentrun && printf 'Try the structural switches first.\n```json\n{"focus": ["MERGE", "QK_CHAINS"]}\n```\n' > $OUT/agentrun/redirect.md
timeout 170 python3 -m sdk.agent.run --definition dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64 --max-iters 3 \
  --workloads 0c23b10c,385742b2 --trials 2 --budget-wall-s 140 --run-dir $OUT/agentrun > $OUT/agent.log 2>&1
echo "offline rc=$?"; tail -6 $OUT/agent.log
