#!/bin/bash
# Device call 1 of session 4: MoE fused-combine branch on the GPU, launch cost under the timer, MoE timelines.
export FIB_SDK_CACHE=/tmp/fibcache
eval "$(python3 -m sdk env install 2>/dev/null)"
S=.scratch/c1
build() { python3 -c "
import sys; sys.path.insert(0,'.')
from pathlib import Path
from sdk import definitions, solutions
p = solutions.load_package(Path('$1'))
solutions.build(p.solution, definitions.load(p.solution.definition)); print('built $1')"; }
(build solutions/fused_moe > $OUT/build-fused.txt 2>&1) &
(build $S/fused_moe_unfused > $OUT/build-unfused.txt 2>&1) &
(build solutions/dsa_topk_indexer > $OUT/build-idx.txt 2>&1) &
timeout 300 python3 -m pytest tests/test_kernel_fused_moe_wgmma.py -m gpu -x -q -s -p no:cacheprovider > $OUT/1-wgmma.txt 2>&1
echo "wgmma rc $?" >> $OUT/1-wgmma.txt
wait
timeout 200 python3 -m pytest tests/test_kernel_fused_moe.py -m gpu -q -s -p no:cacheprovider > $OUT/2-solution.txt 2>&1
echo "solution rc $?" >> $OUT/2-solution.txt
for sol in solutions/fused_moe $S/fused_moe_unfused; do
  echo "== $sol" >> $OUT/3-timeline.txt
  timeout 120 python3 $S/moe_timeline.py $sol 1,7,16,57,80,901,14107 >> $OUT/3-timeline.txt 2>&1
done
timeout 60 python3 $S/launch_prof.py $S/launch_prof.so > $OUT/4-launch.txt 2>&1
timeout 150 python3 -m pytest tests/test_kernel_dsa_topk_indexer.py -m gpu -q -p no:cacheprovider > $OUT/5-indexer.txt 2>&1
echo "indexer rc $?" >> $OUT/5-indexer.txt
tail -3 $OUT/*.txt
