# Session 16 (CPU, repository root, after `git apply` of wip-moe-s15-s16.patch and the A/B): land a variant of the
# A/B into the templates and solutions/fused_moe, commit.
#   bash land.sh cand | cand_half | cand_ga_half
set -e
R=repro/runs/h200-20261206-s16-dev
case "$1" in
  cand) ga=0 ;;
  cand_half) ga=0; cp $R/cand_half_moe_wgmma.cuh templates/fused_moe/moe_wgmma.cuh ;;
  cand_ga_half) ga=1; cp $R/cand_half_moe_wgmma.cuh templates/fused_moe/moe_wgmma.cuh ;;
  *) echo "unknown variant $1"; exit 2 ;;
esac
sed -i "s/^GATHER_A = .*/GATHER_A = $ga/" solutions/fused_moe/render.toml
.nox/sdk/bin/python -c "from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path('solutions/fused_moe'))"
git add templates solutions/fused_moe tests/test_kernel_fused_moe.py tests/test_kernel_fused_moe_wgmma.py
git commit -qm "MoE: $1 of the session-16 A/B (see repro/runs/h200-20261206-s16-dev)"
git log --oneline -1
