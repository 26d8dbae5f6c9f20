"""Merge the 2026-11-29 H200 device runs into repro/results/nvidia-h200-20261129.json (see repro/runs/README.md)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sdk import solutions  # noqa: E402
from sdk.bench import merge  # noqa: E402

RUN3, RUN4 = ROOT / "repro/runs/h200-20261129-run3", ROOT / "repro/runs/h200-20261129-run4"
hashes = {p.name: p.solution.hash() for p in solutions.discover()}
runs = [
    {"label": "run3", "results": [RUN3 / "results.json"],
     "traces": [(p, False) for p in sorted(RUN3.glob("*.jsonl"))], "hashes": hashes,
     # the device copy had no git metadata; this is the commit that was pushed to it (solutions unchanged since)
     "environment_patch": {"commit": "10b00a141f10b27801223b1ee0b52505d55e18fc", "commit_recorded_after_run": True}},
    {"label": "run4", "results": [RUN4 / "results-attn.json", RUN4 / "results-idx.json"],
     "traces": [(p, p.name.startswith("gate_")) for p in sorted(RUN4.glob("*.jsonl"))], "hashes": hashes},
]
path = merge.write(merge.merge(runs), ROOT / "repro/results/nvidia-h200-20261129.json")
print("wrote", path.relative_to(ROOT))
