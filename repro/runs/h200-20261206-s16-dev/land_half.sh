# Session 16: put the idle-half-tiles change (cand_half_moe_wgmma.cuh beside this) into the template, re-render.
set -e
R=repro/runs/h200-20261206-s16-dev
cp $R/cand_half_moe_wgmma.cuh templates/fused_moe/moe_wgmma.cuh
.nox/sdk/bin/python -c "from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path('solutions/fused_moe'))"
