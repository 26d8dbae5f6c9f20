# Session 20 (CPU, repository root, clean main; needs .nox/sdk): the state call3.sh measures. Renders main's solution
# as .variants/c2 (the A/B baseline; any other variant folder is removed), applies wip-moe-pipe.patch on a new branch
# s20-pipe (GEMM2's 128-column tiles with two partial sums in flight, WIDE_128 = 2), commits it and names that commit
# "cand3" in commits.txt, so call3.sh's results can point at it. Leaves the checkout on s20-pipe.
set -e
S=repro/runs/h200-20261207-s20-dev; V=repro/runs/h200-20261206-s16-dev/.variants
rm -rf $V && mkdir -p $V && cp -r solutions/fused_moe $V/c2
sed -i 's/"fused_moe_fp8_sm90"/"fused_moe_fp8_sm90_c2"/' $V/c2/solution/python/main.py
git checkout -q -b s20-pipe
git apply --index $S/wip-moe-pipe.patch
.nox/sdk/bin/python -c "import sys; from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path(sys.argv[1]))" solutions/fused_moe
git diff --quiet -- solutions || { echo "the patch's rendered solution differs from a fresh render" >&2; exit 1; }
git add templates solutions tests && git commit -qm "MoE: GEMM2's 128-column tiles with two partial sums in flight, WIDE_128 = 2 (wip-moe-pipe.patch)"
sed -i "s/^cand3 .*/cand3 $(git rev-parse --short HEAD)/" $S/commits.txt
grep -q "^cand3 " $S/commits.txt || echo "cand3 $(git rev-parse --short HEAD)" >> $S/commits.txt
cat $S/commits.txt
