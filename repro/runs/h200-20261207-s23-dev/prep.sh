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
#   (commit)  + wip-idx-8-grow.patch: session 22's patch 4 (ONE_WAVE 2: double the cluster, up to 16, while the
#             doubled grid is one wave; 0.88x at B = 4 on the mma.sync kernel) on top; rendered as main
#   idx_w2g   idx_w2 rendered ONE_WAVE 2
#   idx_w4g   idx_w4 rendered ONE_WAVE 2
# Writes idx_manifest.txt (name, commit, digest) and .variants/idx_w* beside this script. Ends on branch s23-idx
# (main + patches 1, 7 and 8, rendered as main).
set -e
S=repro/runs/h200-20261207-s23-dev
source repro/runs/h200-20261207-s17-dev/lib.sh   # digest_at, prep_step, prep_flip
bash repro/runs/h200-20261207-s22-dev/prep.sh > /dev/null
# Session 22 timed these on an H100 at 1.00-1.03x main's geomean (idx_i1: 0.97x): call7 leaves them out.
rm -rf repro/runs/h200-20261207-s22-dev/.variants/{idx_i2,idx_i3,idx_i5,idx_i5s8}
I1=$(awk '$1 == "idx_i1" {print $2}' repro/runs/h200-20261207-s22-dev/idx_manifest.txt)
git checkout -q -B s23-idx $I1
W=$(prep_step dsa_topk_indexer $S/wip-idx-7-wgmma.patch \
  "indexer: HEAD_SPLIT 1 scores with f16 wgmma (session 23, unmeasured)")
W8=$(prep_step dsa_topk_indexer $S/wip-idx-8-grow.patch "indexer: ONE_WAVE 2 grows the cluster (session 23, unmeasured)")
flip() { prep_flip dsa_topk_indexer $1 ${3:-$W} "$2" "indexer: $1 (session 23, unmeasured)"; }  # branch, sed[, base]
W2=$(flip s23-w2 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/')
W4=$(flip s23-w4 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^GROUPS = 2$/GROUPS = 4/; s/^STAGES = 4$/STAGES = 3/')
W4S4=$(flip s23-w4s4 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^GROUPS = 2$/GROUPS = 4/')
W2C16=$(flip s23-w2c16 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^CLUSTER = 8$/CLUSTER = 16/')
W2G=$(flip s23-w2g 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^ONE_WAVE = 0$/ONE_WAVE = 2/' $W8)
W4G=$(flip s23-w4g 's/^HEAD_SPLIT = 2$/HEAD_SPLIT = 1/; s/^GROUPS = 2$/GROUPS = 4/; s/^STAGES = 4$/STAGES = 3/;
                    s/^ONE_WAVE = 0$/ONE_WAVE = 2/' $W8)
git checkout -q s23-idx
V=$S/.variants; rm -rf $V && mkdir -p $V
for p in "idx_w2 $W2" "idx_w4 $W4" "idx_w4s4 $W4S4" "idx_w2c16 $W2C16" "idx_w2g $W2G" "idx_w4g $W4G"; do
  set -- $p; echo "$1 $2 $(digest_at $2 dsa_topk_indexer)"; cp -r /tmp/prep_wt/solutions/dsa_topk_indexer $V/$1
done > $S/idx_manifest.txt   # left uncommitted
cat $S/idx_manifest.txt
