# Session 23, one device call for the indexer (repository root; checkout: branch s23-idx after prep.sh). Carry
# .whl-moe .official repro/runs/h200-20261207-s22-dev/.variants repro/runs/h200-20261207-s23-dev/.variants.
# Session 22's call6.sh over both sessions' variants (idx_main, s22's idx_i1 / i3g / i6 / i6g, abl_noselect, s23's
# idx_w*): the A/B, then the winner's GPU tests and repro (no peers) against its session's idx_manifest.txt.
AB_VARIANTS=repro/runs/h200-20261207-s23-dev/.variants:repro/runs/h200-20261207-s22-dev/.variants \
  AB_S=${AB_S:-240} exec bash repro/runs/h200-20261207-s22-dev/call6.sh
