"""Gate evidence (repro/evidence/<solution>/) for the submitted solutions from the committed H200 run traces.

Per workload the latest trace across repro/runs/h200-20261129-*/ is used (bench traces and gate-only traces are
both full gate runs: 3 trials, seed 0, contest tolerance). Refuses when a solution's sources changed since.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sdk import jsonl, solutions, workloads  # noqa: E402
from sdk._fib import Trace  # noqa: E402
from sdk.submit.evidence import _TracedResult, write_evidence  # noqa: E402

RESULTS = ROOT / "repro/results/nvidia-h200-20261129.json"
RUNS = [ROOT / "repro/runs/h200-20261129-run3", ROOT / "repro/runs/h200-20261129-run4"]


def main(dirs: list[str]) -> None:
    merged = json.loads(RESULTS.read_text())
    for d in dirs:
        package = solutions.load_package(ROOT / d)
        rows = [r for r in merged["rows"] if r["solution"] == package.name]
        if {r.get("solution_hash") for r in rows} != {package.solution.hash()}:
            raise SystemExit(f"{package.name}: sources changed since the H200 runs")
        latest = {}
        for run in RUNS:  # oldest first: later traces replace earlier ones
            for path in sorted(run.glob("*.jsonl")):
                for line in jsonl.read(path):
                    t = Trace.model_validate_json(line)
                    if t.solution == package.name:
                        if t.evaluation.status.value == "PASSED" or t.workload.uuid not in latest:
                            latest[t.workload.uuid] = t
        order = [w.uuid for w in workloads.load(package.solution.definition)]
        traces = [latest[u] for u in order if u in latest]
        env = {"gpu": "NVIDIA H200", "runs": merged["environment"]["runs"], "trials": 3, "seed": 0,
               "tolerance": "contest (sdk.gate.contest_tolerance)"}
        folder = write_evidence(package, [_TracedResult(t.workload, t.evaluation.status.value, t) for t in traces],
                                env, RESULTS.relative_to(ROOT), ROOT / "repro/evidence")
        print(f"{package.name}: {sum(t.evaluation.status.value == 'PASSED' for t in traces)}/{len(order)} -> "
              f"{folder.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
