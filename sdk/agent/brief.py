"""The task as a model sees it: definition, PyTorch reference, workload axes, the current best solution (sources,
gate rows, latencies, floors, peers) and the role's skills, within a character budget.

Nothing is cut in the middle: every section and every file is either shown whole or listed under "Not shown"
with its size, an outline (kernels, functions) and the `read_file` path that returns it. Sections go in a fixed
priority (the task first, then evidence, skills, then sources most relevant first), so a small budget drops the
least relevant files, never a piece of one.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import definitions as defs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "repro" / "results"
SUBMISSION = REPO / "submission.toml"
OUTLINE = re.compile(r"^\s*(?:template\s*<.*|.*__global__.*|(?:static\s+)?(?:inline\s+)?(?:__device__\s+)?"
                     r"(?:void|int|float|bool|auto)\s+\w+\s*\(.*|def \w+\(.*|class \w+.*|struct \w+.*)$")
DEFAULT_CHARS = 60_000


@dataclass
class Section:
    title: str
    body: str
    path: str | None = None      # the read_file path that returns it when it is not shown
    outline: str = ""


def outline(text: str, limit: int = 30) -> str:
    lines = [f"{n}: {line.strip()[:110]}" for n, line in enumerate(text.splitlines(), 1) if OUTLINE.match(line)]
    more = f"\n... {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def fit(sections: list[Section], budget: int) -> str:
    """Sections in order, each whole while it fits; the rest listed with how to read them."""
    shown, hidden, used = [], [], 0
    for section in sections:
        block = f"## {section.title}\n{section.body.rstrip()}\n"
        if used + len(block) <= budget:
            shown.append(block)
            used += len(block)
        else:
            hidden.append(section)
    if hidden:
        lines = ["## Not shown here (budget): read them with the read_file tool"]
        for s in hidden:
            lines.append(f"- `{s.path or s.title}`: {len(s.body)} chars, {s.body.count(chr(10)) + 1} lines"
                         + (f"; outline:\n```\n{s.outline}\n```" if s.outline else ""))
        shown.append("\n".join(lines) + "\n")
    return "\n".join(shown)


def definition_section(name: str) -> list[Section]:
    definition = defs.load(name)
    spec = definition.model_dump(mode="json", exclude={"reference"}, exclude_none=True)
    return [Section(f"Definition `{name}` (JSON, reference below)", "```json\n" + json.dumps(spec, indent=1)
                    + "\n```", "definition/definition.json"),
            Section("PyTorch reference (the ground truth the gate compares against)",
                    "```python\n" + defs.reference_source(name).rstrip() + "\n```", "definition/reference.py",
                    outline(defs.reference_source(name)))]


def workload_section(name: str, all_workloads: list, selected: list) -> Section:
    axes: dict[str, list] = {}
    for w in all_workloads:
        for key, value in w.axes.items():
            axes.setdefault(key, []).append(value)
    lines = [f"{len(all_workloads)} official workloads; variable axes:"]
    for key, values in axes.items():
        lines.append(f"- `{key}`: {min(values)} .. {max(values)}, median {statistics.median(values):g}, "
                     f"{len(set(values))} distinct")
    lines.append(f"\nSelected for this run's gate and bench ({len(selected)}):")
    lines += [f"- `{w.uuid[:8]}`: " + ", ".join(f"{k}={v}" for k, v in w.axes.items()) for w in selected]
    lines.append("Other workloads can be gated by uuid prefix (gate/bench `workloads`); the list: read_file "
                 "`definition/workloads.txt`.")
    return Section("Workloads", "\n".join(lines), "definition/workloads.txt")


def workloads_listing(all_workloads: list) -> str:
    return "\n".join(f"{w.uuid} " + " ".join(f"{k}={v}" for k, v in w.axes.items()) for w in all_workloads) + "\n"


def committed_solution(name: str) -> tuple[str, Path] | None:
    """(solution name, folder) of the committed kernel submitted for `name`, from submission.toml."""
    try:
        folders = tomllib.loads(SUBMISSION.read_text())["submit"]["solutions"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None
    for folder in folders:
        try:
            config = tomllib.loads((REPO / folder / "config.toml").read_text())["solution"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            continue
        if config.get("definition") == name:
            return config["name"], REPO / folder
    return None


def committed_evidence(name: str, selected: list, every_row: bool = False) -> Section | None:
    """The committed GPU measurements of the submitted kernel: latency, reference, floor and peers per workload
    (those of the selected workloads, else the first 8; `every_row` for all of them)."""
    files = sorted(RESULTS.glob("*.json")) if RESULTS.is_dir() else []
    chosen = committed_solution(name)
    if not files or chosen is None:
        return None
    solution, folder = chosen
    data = json.loads(files[-1].read_text())
    rows = [r for r in data.get("rows", []) if r.get("definition") == name and r.get("solution") == solution]
    if not rows:
        return None
    summary = (data.get("summary") or {}).get(name) or {}
    gpus = sorted({r.get("gpu") for r in data.get("environment", {}).get("runs", []) if r.get("gpu")})
    wanted = {w.uuid.replace("-", "")[:8] for w in selected}
    picked = rows if every_row else [r for r in rows if r["workload"][:8] in wanted] or rows[:8]
    lines = [f"`{solution}` ({folder.relative_to(REPO)}), measured on {', '.join(gpus) or 'a GPU'} "
             f"(`{files[-1].relative_to(REPO)}`): {summary.get('passed', '?')}/{summary.get('total', '?')} PASSED, "
             f"mean speedup vs reference {summary.get('mean_speedup_vs_reference', '-')}, "
             f"mean latency / floor {summary.get('mean_latency_over_floor', '-')}.",
             "| workload | axes | status | latency ms | reference ms | floor ms | peers (ms) |", "|---|---|---|---|---|---|---|"]
    for r in picked:
        peers = ", ".join(f"{k}: {v.get('latency_ms'):.4g}" for k, v in (r.get("peers") or {}).items()
                          if v.get("latency_ms") is not None) or "-"
        lines.append(f"| {r['workload'][:8]} | {' '.join(f'{k}={v}' for k, v in r.get('axes', {}).items())} | "
                     f"{r.get('status')} | {_num(r.get('latency_ms'))} | {_num(r.get('reference_latency_ms'))} | "
                     f"{_num(r.get('floor_ms'))} | {peers} |")
    return Section("Committed best kernel: GPU evidence (bounds = floor: bytes / HBM bandwidth or FLOPs / peak)",
                   "\n".join(lines) + ("" if every_row else f"\n({len(picked)} of {len(rows)} rows; all: read_file "
                                                        f"`evidence/committed.md`)"), "evidence/committed.md")


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def run_evidence(best: dict, gate_rows: list, bench_rows: list) -> Section:
    lines = [f"Best candidate of this run: `{best['id']}` (parent {best.get('parent') or '-'}), params "
             f"{json.dumps(best.get('params'), sort_keys=True)}, changed files {best.get('overlay_files') or '-'}; "
             f"mean {best.get('latency_ms')} ms, speedup vs reference {best.get('speedup_vs_reference', '-')}, "
             f"vs parent {best.get('speedup_vs_parent', '-')}.",
             "| workload | gate | latency ms | reference ms | speedup vs ref |", "|---|---|---|---|---|"]
    timed = {r["workload"]: r for r in bench_rows}
    for row in gate_rows:
        t = timed.get(row["workload"], {})
        ratio = (t["reference_ms"] / t["latency_ms"]) if t.get("reference_ms") and t.get("latency_ms") else None
        lines.append(f"| {str(row['workload'])[:8]} | {row['status']} {row.get('reason') or ''} | "
                     f"{_num(t.get('latency_ms'))} | {_num(t.get('reference_ms'))} | {_num(ratio)} |")
    for kernel in best.get("ptxas") or []:
        lines.append(f"- ptxas {kernel['kernel'][:60]}: {kernel['registers']} registers, {kernel['spill_bytes']} B "
                     f"spills, {kernel['smem_bytes']} B static smem")
    return Section("Current best in this run: gate rows and latencies", "\n".join(lines))


def source_sections(files: dict[str, str], label: str, first: list[str] = ()) -> list[Section]:
    """One section per file, most relevant first: named files, then CUDA, then the rest (largest last)."""
    def rank(name: str) -> tuple:
        kind = 0 if name in first else 1 if name.endswith((".cuh", ".cu")) else 2 if name == "main.py" else 3
        return kind, len(files[name]), name

    fence = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".h": "cpp", ".cpp": "cpp"}
    return [Section(f"{label}: `{name}` ({files[name].count(chr(10))} lines)",
                    f"```{fence.get(Path(name).suffix, '')}\n{files[name].rstrip()}\n```", f"{label}/{name}",
                    outline(files[name])) for name in sorted(files, key=rank)]


def demote_headings(markdown: str, levels: int = 2) -> str:
    """Headings one section deeper (outside code fences), so a skill's own sections nest under its title."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" * levels + line if not fenced and re.match(r"#+ ", line) else line)
    return "\n".join(out)


def skill_sections(skills: list) -> list[Section]:
    return [Section(f"Skill {s.name} (v{s.version}): {s.description}", demote_headings(s.body), f"skills/{s.name}.md")
            for s in skills]


def task_brief(name: str, *, all_workloads: list, selected: list, skills: list, sources: dict[str, str],
               sources_label: str, best: dict | None = None, gate_rows: list = (), bench_rows: list = (),
               first_files: list[str] = (), budget: int = DEFAULT_CHARS, policy: list[str] = ()) -> str:
    sections = definition_section(name) + [workload_section(name, all_workloads, selected)]
    if best is not None:
        sections.append(run_evidence(best, list(gate_rows), list(bench_rows)))
    committed = committed_evidence(name, selected)
    if committed is not None:
        sections.append(committed)
    if policy:
        sections.append(Section("Rules (human policy)", "\n".join(f"- {line}" for line in policy)))
    sections += skill_sections(skills)
    sections += source_sections(sources, sources_label, list(first_files))
    return fit(sections, budget)
