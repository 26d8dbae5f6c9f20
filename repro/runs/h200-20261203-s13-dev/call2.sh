# Throwaway device call (session 13): the one-cluster attention kernel (MERGE = 2, rendered): its GPU tests (edge
# cases on CUDA: scattered padding, valid counts at tile edges, empty tokens, duplicates, 16 and 150 tokens), then
# the A/B of tile shapes against the grid-barrier kernel (attn_ab.py), then the indexer's GPU tests.
eval "$(python3 -m sdk env install --wheels .whl-base 2>/dev/null)"
export FIB_SDK_CACHE=/tmp/fibcache FIB_SDK_COMMIT=17c0a1c+attn-cluster
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/test_kernel_dsa_sparse_attention.py > $OUT/attn_tests.txt 2>&1; echo "attn tests rc $?" >> $OUT/rc.txt
timeout 240 python3 repro/runs/h200-20261203-s13-dev/attn_ab.py > $OUT/attn_ab.txt 2>&1; echo "attn ab rc $?" >> $OUT/rc.txt
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_kernel_dsa_topk_indexer.py > $OUT/indexer_tests.txt 2>&1; echo "indexer tests rc $?" >> $OUT/rc.txt
