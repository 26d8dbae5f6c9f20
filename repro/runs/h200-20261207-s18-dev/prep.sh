# Session 18 (CPU, repository root, clean main): what call_c.sh needs. Applies the session-16 patch (the candidate
# "cand": sessions 15-16's small-T work, GATHER_A = 0), commits it on local branch s18-cand and writes its commit to
# commits.txt (the results file names it; its sources_sha256 is then checked against that branch), and renders the
# A/B copies into the s16 .variants folder: landed (main's solution), c_oldroute and c_nodefer (make_variants.py).
# Leaves the checkout on s18-cand. Needs .nox/sdk (nox -s tests -- --co -q).
set -e
S=repro/runs/h200-20261207-s18-dev; R=repro/runs/h200-20261206-s16-dev
git apply $R/wip-moe-s15-s16.patch
.nox/sdk/bin/python $R/make_variants.py > /dev/null   # landed (from HEAD), the rendered cand, cand_half, cand_ga_half
rm -rf $R/.variants/cand_half $R/.variants/cand_ga_half   # measured in session 18: no gain / 1.7x slower at large T
git checkout -q -b s18-cand
git add templates solutions tests
git commit -qm "MoE: sessions 15-16 candidate (wip-moe-s15-s16.patch applied)"
.nox/sdk/bin/python $S/make_variants.py > /dev/null
echo "cand $(git rev-parse --short HEAD)" > $S/commits.txt
cat $S/commits.txt
