# Session 22 (CPU, repository root, on clean main; needs .nox/sdk): remakes the indexer candidates that call6.sh
# measures, as commits of branch s22-idx, each patch applied to the template and the solution re-rendered:
#   idx_i1   wip-idx-1-table.patch: every CTA keeps the row's block table in shared memory (page loop reads it there)
#   idx_i2   + wip-idx-2-match-any.patch: one remote histogram atomic per first digit and warp (match_any)
#   idx_i3   + wip-idx-3-split-rank.patch: rank 0's split pass by warps (ballots), > 64 candidates bucket-sorted
#   (commit) + wip-idx-4-grow.patch: ONE_WAVE = 2 in the space (double the cluster while one wave), rendered 0
#   idx_i5   + wip-idx-5-bulk-pages.patch: one bulk copy per page into mbarrier slots, partials double-buffered
#   idx_i6   + wip-idx-6-no-match-any.patch: one remote atomic per token again (match_any cost 6%, out1/out2)
#   idx_i3g  (branch s22-i3g) patch 4's commit rendered ONE_WAVE = 2
#   idx_i5s8 (branch s22-i5s8) idx_i5 rendered STAGES = 8
#   idx_i6g  (branch s22-i6g) idx_i6 rendered ONE_WAVE = 2
#   abl_noselect  idx_i6's folder with rank 0 returning at the cluster barrier (no select: wrong output, timed
#                 only, to size the select's share of the span)
# Writes idx_manifest.txt (name, commit, digest of solutions/dsa_topk_indexer; idx_main = main) and .variants/idx_*
# (each commit's solution folder). Ends on branch s22-idx (its tip is idx_i6).
set -e
S=repro/runs/h200-20261207-s22-dev
source repro/runs/h200-20261207-s17-dev/lib.sh   # digest_at, prep_step, prep_flip
git checkout -q main; BASE=$(git rev-parse --short HEAD)   # from main whatever was checked out (s21's prep ends elsewhere)
git checkout -q -B s22-idx $BASE
step() { prep_step dsa_topk_indexer $S/$1 "indexer: $2 (session 22, unmeasured)"; }  # patch, message
I1=$(step wip-idx-1-table.patch "every CTA keeps the row's block table in shared memory")
I2=$(step wip-idx-2-match-any.patch "one remote first-digit atomic per digit and warp")
I3=$(step wip-idx-3-split-rank.patch "rank 0's split pass by warps; more than 64 candidates bucket-sorted")
I4=$(step wip-idx-4-grow.patch "ONE_WAVE = 2 in the space, rendered 0")
I5=$(step wip-idx-5-bulk-pages.patch "one bulk copy per page into mbarrier slots")
I6=$(step wip-idx-6-no-match-any.patch "one remote first-digit atomic per token again")
flip() { prep_flip dsa_topk_indexer $1 $2 "$3" "indexer: $4 (session 22, unmeasured)"; }  # branch, base, sed, message
I3G=$(flip s22-i3g $I4 's/^ONE_WAVE = 0$/ONE_WAVE = 2/' "rendered ONE_WAVE = 2")
I5S8=$(flip s22-i5s8 $I5 's/^STAGES = 4$/STAGES = 8/' "bulk pages rendered STAGES = 8")
I6G=$(flip s22-i6g $I6 's/^ONE_WAVE = 0$/ONE_WAVE = 2/' "no match_any, rendered ONE_WAVE = 2")
git checkout -q s22-idx
V=$S/.variants; rm -rf $V && mkdir -p $V
MAN=$(for p in "idx_main $BASE" "idx_i1 $I1" "idx_i2 $I2" "idx_i3 $I3" "idx_i3g $I3G" "idx_i5 $I5" \
         "idx_i5s8 $I5S8" "idx_i6 $I6" "idx_i6g $I6G"; do
  set -- $p; echo "$1 $2 $(digest_at $2 dsa_topk_indexer)"; cp -r /tmp/prep_wt/solutions/dsa_topk_indexer $V/$1
done)
A=$V/abl_noselect; cp -r $V/idx_i6 $A && F=$A/solution/python/indexer.cuh
grep -q '^  if (rank != 0) return;$' $F && sed -i 's/^  if (rank != 0) return;$/  return;  \/\/ ablation: no select/' $F
MAN="$MAN
abl_noselect $I6 $(cd $V && find abl_noselect -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
echo "$MAN" > $S/idx_manifest.txt   # after the commits: left uncommitted
cat $S/idx_manifest.txt
