# Session 23 (CPU, repository root, on clean main; needs .nox/sdk): the wgmma indexer candidates that call7.sh
# measures beside session 22's. Runs session 22's prep.sh first (its branches, .variants and idx_manifest.txt), then
# builds on its idx_i1 (main + the block table in shared memory):
#   (commit)  + wip-idx-7-wgmma.patch: HEAD_SPLIT 1 = one warpgroup per page pipeline scores whole pages against
#             all 64 heads with f16 wgmma (A = the page's rows widened in registers, B = q in shared memory);
#             GROUPS 4 allowed; rendered as main (HEAD_SPLIT 2)
#   idx_w2    HEAD_SPLIT 1, GROUPS 2, STAGES 4 (256 threads)
#   idx_w4    HEAD_SPLIT 1, GROUPS 4, STAGES 3 (512 threads)
#   idx_w4s4  HEAD_SPLIT 1, GROUPS 4, STAGES 4
#   idx_w2c16 HEAD_SPLIT 1, GROUPS 2, STAGES 4, CLUSTER 16
# Writes idx_manifest.txt (name, commit, digest) and .variants/idx_w* beside this script. Ends on branch s23-idx.
set -e
S=repro/runs/h200-20261207-s23-dev
source repro/runs/h200-20261207-s17-dev/lib.sh   # render_solution, digest_at
bash repro/runs/h200-20261207-s22-dev/prep.sh > /dev/null
I1=$(awk '$1 == "idx_i1" {print $2}' repro/runs/h200-20261207-s22-dev/idx_manifest.txt)
git checkout -q -B s23-idx $I1
git apply --index $S/wip-idx-7-wgmma.patch && render_solution solutions/dsa_topk_indexer
git add -A solutions/dsa_topk_indexer && git commit -qm "indexer: HEAD_SPLIT 1 scores with f16 wgmma (session 23, unmeasured)"
W=$(git rev-parse --short HEAD)
flip() {  # branch, render.toml sed script -> prints the commit (from W)
  git checkout -q -B $1 $W && sed -i "$2" solutions/dsa_topk_indexer/render.toml
  render_solution solutions/dsa_topk_indexer && git commit -qam "indexer: $1 (session 23, unmeasured)"
  git rev-parse --short HEAD
}
W2=$(flip s23-w2 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/')
W4=$(flip s23-w4 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^GROUPS = 2$/GROUPS = 4/; s/^STAGES = 4$/STAGES = 3/')
W4S4=$(flip s23-w4s4 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^GROUPS = 2$/GROUPS = 4/')
W2C16=$(flip s23-w2c16 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^CLUSTER = 8$/CLUSTER = 16/')
git checkout -q s23-idx
V=$S/.variants; rm -rf $V && mkdir -p $V
for p in "idx_w2 $W2" "idx_w4 $W4" "idx_w4s4 $W4S4" "idx_w2c16 $W2C16"; do
  set -- $p; echo "$1 $2 $(digest_at $2 dsa_topk_indexer)"; cp -r /tmp/prep_wt/solutions/dsa_topk_indexer $V/$1
done > $S/idx_manifest.txt   # left uncommitted
cat $S/idx_manifest.txt
