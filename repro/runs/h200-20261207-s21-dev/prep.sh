# Session 21 (CPU, repository root, clean main; needs .nox/sdk): remakes what call5.sh measures, as session 21 left
# it unrun (no device machine could be started). Ends on branch s21-both (checkout) with:
#   s20-pipe: session 20's cand3 / cand4 (its prep.sh), plus cand5 = cand4 rendered with WIDE_128 = 1;
#   s21-attn: wip-attn-bulk.patch (attention BULK_ROWS / BULK_MERGE tunables, rendered off = attn_b00), then the
#             renders attn_b11 (both on), attn_b11s128 (both on, MAX_SPLITS 128), attn_b10 (BULK_ROWS alone);
#   s21-both: s20-pipe merged with s21-attn, so solutions/fused_moe is cand5 and the attention is attn_b10.
# Writes manifest.txt (MoE: c2 = main, c3, c4, cand = cand5) and attn_manifest.txt (attn_main = main, the four
# renders): name, commit, digest of the solution folder; and both .variants folders (each copy of a commit's
# solution; the MoE copies load under their own extension names).
set -e
S=repro/runs/h200-20261207-s21-dev; S20=repro/runs/h200-20261207-s20-dev; V16=repro/runs/h200-20261206-s16-dev/.variants
render() { .nox/sdk/bin/python -c "import sys; from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path(sys.argv[1]))" "$1"; }
source repro/runs/h200-20261207-s17-dev/lib.sh   # solution_digest
digest_at() {  # commit, solution folder name (the folder is left in /tmp/s21wt)
  rm -rf /tmp/s21wt && mkdir /tmp/s21wt && git archive "$1" "solutions/$2" | tar -x -C /tmp/s21wt
  solution_digest /tmp/s21wt "$2"
}
BASE=$(git rev-parse --short HEAD)

bash $S20/prep.sh > /dev/null   # branch s20-pipe at cand4; .variants c2 / c3 / c4w1
C3=$(grep '^cand3 ' $S20/commits.txt | cut -d' ' -f2); C4=$(grep '^cand4 ' $S20/commits.txt | cut -d' ' -f2)
git checkout -q -- $S20/commits.txt
sed -i "s/^WIDE_128 = 2$/WIDE_128 = 1/" solutions/fused_moe/render.toml && render solutions/fused_moe
git commit -qam "MoE: cand4 rendered with WIDE_128 = 1 (both GEMMs wide, as quarters; session 21, unmeasured)"
C5=$(git rev-parse --short HEAD)
rm -rf $V16/c4w1 $V16/c4 && mkdir -p /tmp/s21c4 && rm -rf /tmp/s21c4/* && git archive $C4 solutions/fused_moe | tar -x -C /tmp/s21c4
cp -r /tmp/s21c4/solutions/fused_moe $V16/c4 && sed -i 's/"fused_moe_fp8_sm90"/"fused_moe_fp8_sm90_c4"/' $V16/c4/solution/python/main.py
MOE=$(for p in "c2 $BASE" "c3 $C3" "c4 $C4" "cand $C5"; do set -- $p; echo "$1 $2 $(digest_at $2 fused_moe)"; done)

git checkout -q -B s21-attn $BASE
git apply --index $S/wip-attn-bulk.patch && render solutions/dsa_sparse_attention
git diff --quiet -- solutions || { echo "wip-attn-bulk.patch: its rendered solution differs from a fresh render" >&2; exit 1; }
git commit -qm "attention: BULK_ROWS / BULK_MERGE tunables, rendered off (session 21, unmeasured)"
A0=$(git rev-parse --short HEAD)
flip() {  # render.toml edits (sed script), commit message -> prints the commit
  sed -i "$1" solutions/dsa_sparse_attention/render.toml && render solutions/dsa_sparse_attention
  git commit -qam "attention: $2 (session 21, unmeasured)" && git rev-parse --short HEAD
}
A1=$(flip 's/^BULK_ROWS = 0/BULK_ROWS = 1/; s/^BULK_MERGE = 0/BULK_MERGE = 1/' "BULK_ROWS = 1, BULK_MERGE = 1")
A2=$(flip 's/^MAX_SPLITS = 64/MAX_SPLITS = 128/' "BULK_ROWS = 1, BULK_MERGE = 1, MAX_SPLITS = 128")
A3=$(flip 's/^MAX_SPLITS = 128/MAX_SPLITS = 64/; s/^BULK_MERGE = 1/BULK_MERGE = 0/' "BULK_ROWS = 1 alone")
V=$S/.variants; rm -rf $V && mkdir -p $V
ATTN=$(for p in "attn_main $BASE" "attn_b00 $A0" "attn_b11 $A1" "attn_b11s128 $A2" "attn_b10 $A3"; do
  set -- $p; echo "$1 $2 $(digest_at $2 dsa_sparse_attention)"; cp -r /tmp/s21wt/solutions/dsa_sparse_attention $V/$1
done)
git checkout -q -B s21-both s20-pipe && git merge -q --no-edit s21-attn
echo "$MOE" > $S/manifest.txt && echo "$ATTN" > $S/attn_manifest.txt   # after the commits: left uncommitted
cat $S/manifest.txt $S/attn_manifest.txt
