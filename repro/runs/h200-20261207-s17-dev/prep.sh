# Session 17 (CPU, repository root, clean main): rebuilds what call_repro.sh / call_all.sh need from the session-16
# patch: branches s17-cand (patch applied), s17-cand_half and s17-cand_ga_half (land.sh's variants, committed), the
# .variants copies (make_variants.py) and manifest.txt (each branch's commit and the digest of its rendered
# solutions/fused_moe, which the device scripts check before naming that commit in a results file). Leaves the
# checkout on s17-cand. Needs .nox/sdk (nox -s tests -- --co -q).
set -e
source repro/runs/h200-20261207-s17-dev/lib.sh
git apply $R/wip-moe-s15-s16.patch
.nox/sdk/bin/python $R/make_variants.py > /dev/null
git checkout -q -b s17-cand
git add templates solutions tests
git commit -qm "MoE: sessions 15-16 candidate (wip-moe-s15-s16.patch applied)"
for v in cand_half cand_ga_half; do
  git checkout -q -b s17-$v s17-cand && bash $R/land.sh $v > /dev/null && git checkout -q s17-cand
done
: > $D/manifest.txt
for v in cand cand_half cand_ga_half; do
  tmp=$(mktemp -d); git archive s17-$v solutions/fused_moe | tar -x -C $tmp
  echo "$v $(git rev-parse --short s17-$v) $(solution_digest $tmp)" >> $D/manifest.txt; rm -rf $tmp
done
cat $D/manifest.txt
