# Session 20 (CPU, repository root, clean main; needs .nox/sdk): the states call3.sh measures. On a new branch
# s20-pipe it applies and commits, each checked against a fresh render:
#   wip-moe-pipe.patch     (commits.txt "cand3"): GEMM2's 128-column tiles keep two partial sums in flight;
#                          WIDE_128 = 2 (GEMM1 wide, GEMM2 128 columns);
#   wip-moe-quarters.patch (commits.txt "cand4"): wide tiles as four m64n64 quarters, two sums in flight.
# .variants (the old folder is replaced): c2 = main's solution, c3 = cand3's, c4w1 = cand4 rendered with WIDE_128 = 1
# (both GEMMs wide); the checkout is cand4. Each copy loads under its own extension name.
set -e
S=repro/runs/h200-20261207-s20-dev; V=repro/runs/h200-20261206-s16-dev/.variants
render() { .nox/sdk/bin/python -c "import sys; from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path(sys.argv[1]))" "$1"; }
copy() { rm -rf $V/$1 && cp -r solutions/fused_moe $V/$1 && sed -i "s/\"fused_moe_fp8_sm90\"/\"fused_moe_fp8_sm90_$1\"/" $V/$1/solution/python/main.py; }
step() {  # patch, commits.txt name
  git apply --index $S/$1 && render solutions/fused_moe
  git diff --quiet -- solutions || { echo "$1: its rendered solution differs from a fresh render" >&2; exit 1; }
  git commit -qm "MoE: $1 (session 20, unmeasured)"
  sed -i "/^$2 /d" $S/commits.txt && echo "$2 $(git rev-parse --short HEAD)" >> $S/commits.txt
}
rm -rf $V && mkdir -p $V && copy c2
git checkout -q -B s20-pipe  # (re)made from the current checkout
step wip-moe-pipe.patch cand3 && copy c3
step wip-moe-quarters.patch cand4
copy c4w1 && sed -i "s/^WIDE_128 = 2$/WIDE_128 = 1/" $V/c4w1/render.toml && render $V/c4w1
sed -i 's/"fused_moe_fp8_sm90"/"fused_moe_fp8_sm90_c4w1"/' $V/c4w1/solution/python/main.py
grep -q "kWide128 = kGatherA ? 0 : 1;" $V/c4w1/solution/python/moe_launch.cu
cat $S/commits.txt
