"""Re-apply the bench's plausibility rule (runner.implausibly_fast) to the measurements a results file recorded.

The rule runs when a row is made. When it changes -- 2026-12-01: a margin, because a read-mostly kernel streams
at the device-copy rate the floor is computed with -- older files keep the old rule's verdicts. `rescore_rows`
changes only rows the old rule rejected and the current one accepts: status back to PASSED, latency_ms = the mean
of the row's own trial latencies (as make_row computes it), implausible off, the strict verdict from the gate's
recorded strict reason. The old reason stays in the row (`rescored_from`) and the file's environment lists the
rows (`rescored`). No measurement is changed or added.
"""
from __future__ import annotations

import datetime as _dt
import json
import statistics
from pathlib import Path

from . import scoring
from .merge import write
from .runner import FLOOR_MARGIN, implausibly_fast

FLOOR_REASON = "under the physical floor"


def rescore_rows(rows: list[dict]) -> list[str]:
    """Rows (in place) whose floor rejection the current rule withdraws; returns their workload uuids."""
    changed = []
    for row in rows:
        trials = row.get("latency_trials_ms") or []
        if row.get("status") != "RUNTIME_ERROR" or FLOOR_REASON not in (row.get("reason") or "") or not trials:
            continue
        latency = statistics.fmean(trials)
        if implausibly_fast(latency, row.get("floor_ms")):
            continue
        row.update(status="PASSED", latency_ms=latency, implausible=False, strict_passed=not row.get("strict_reason"),
                   rescored_from=row["reason"], reason="")
        changed.append(row["workload"])
    return changed


def rescore_file(path: Path, write_back: bool = True) -> list[str]:
    results = json.loads(Path(path).read_text())
    changed = rescore_rows(results["rows"])
    if changed and write_back:
        results["environment"].setdefault("rescored", []).append(
            {"rule": f"latency < {FLOOR_MARGIN} x floor_ms", "workloads": changed,
             "at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")})
        results["summary"] = scoring.summarize(results["rows"])
        write(results, Path(path))
    return changed
