# Device call 1: adversarial GPU tests, fused MoE kernel check, agent-loop demo on the attention template.
source tools/device_env.sh
timeout 140 python3 -m pytest -q -p no:cacheprovider -m gpu -rA tests/adversarial tests/test_isolation.py > $OUT/adversarial_gpu.log 2>&1; echo "adversarial rc=$?"; grep -E "passed|failed|PASSED|FAILED|ERROR" $OUT/adversarial_gpu.log | tail -16
timeout 210 python3 tools/check_fused_moe.py > $OUT/moe_check.log 2>&1; echo "moe rc=$?"; tail -28 $OUT/moe_check.log
mkdir -p $OUT/agentrun && printf 'Try the structural switches first.\n```json\n{"focus": ["MERGE", "QK_CHAINS"]}\n```\n' > $OUT/agentrun/redirect.md
timeout 195 python3 -m sdk.agent.run --definition dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64 --max-iters 3 --workloads 0c23b10c,385742b2 --trials 2 --budget-wall-s 140 --run-dir $OUT/agentrun > $OUT/agent.log 2>&1; echo "agent rc=$?"; tail -20 $OUT/agent.log
tar czf $OUT/agentrun.tgz -C $OUT agentrun && rm -rf $OUT/agentrun
