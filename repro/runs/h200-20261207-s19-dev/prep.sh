# Session 19 (CPU, repository root, clean main; needs .nox/sdk): the state call1.sh measures, from patches. Renders
# main's solution as .variants/landed, applies the session-16 candidate (branch s19-cand, first commit; its solution
# also as .variants/c_prev), then this session's wip-moe-wide-sfb.patch (wide 128-row tiles behind WIDE_128, weight
# scales through the ring; second commit, named in commits.txt as "cand"), and renders cand with WIDE_128 = 1 as
# .variants/c_wide. Leaves the checkout on s19-cand.
set -e
S=repro/runs/h200-20261207-s19-dev; R=repro/runs/h200-20261206-s16-dev; V=$R/.variants
rename() { sed -i "s/\"fused_moe_fp8_sm90\"/\"fused_moe_fp8_sm90_$1\"/" $V/$1/solution/python/main.py; }
copy() { rm -rf $V/$1 && mkdir -p $V && cp -r solutions/fused_moe $V/$1 && rename $1; }  # under its own extension name
render() { .nox/sdk/bin/python -c "import sys; from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path(sys.argv[1]))" "$1"; }
copy landed
git checkout -q -b s19-cand
git apply $R/wip-moe-s15-s16.patch && render solutions/fused_moe
git add templates solutions tests && git commit -qm "MoE: sessions 15-16 candidate (wip-moe-s15-s16.patch applied)"
copy c_prev
git apply $S/wip-moe-wide-sfb.patch && render solutions/fused_moe
git add templates solutions tests && git commit -qm "MoE: wide row tiles (WIDE_128, off) and weight scales through the ring (wip-moe-wide-sfb.patch)"
echo "cand $(git rev-parse --short HEAD)" > $S/commits.txt
copy c_wide
sed -i "s/^WIDE_128 = 0$/WIDE_128 = 1/" $V/c_wide/render.toml && render $V/c_wide && rename c_wide
grep -q "kWide128 = 1 != 0" $V/c_wide/solution/python/moe_launch.cu
cat $S/commits.txt
