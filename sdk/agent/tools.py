"""The SDK's tools for a kernel agent: the same functions behind litellm function calling (`session`) and the MCP
server (`mcp_server`). Each works on one candidate's `Workspace` and returns text for the model plus data.

  list_files, read_file      what the candidate, its parent, the template, the definition and the skills contain
  apply_patch                a unified diff to the candidate's sources (all or nothing)
  render_template            a point of the template's parameter space (replaces the sources)
  compile                    nvcc sm_90a compile check with the ptxas report (registers, spills, smem)
  gate                       correctness gate on chosen workloads (GPU; or the CPU torch fallback if allowed)
  bench                      gate + timing (CUPTI, PyTorch reference in the same worker): speedups vs reference
                             and vs the parent
  profile                    one ncu pass on a workload (where the GPU machine allows counters)
  finish                     end this candidate; the loop's own gate and bench decide what it is worth

Gate, bench and profile hold one device of the pool each, so candidates in flight never share a GPU.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import definitions as defs
from ..errors import BadInputError
from . import brief
from .build import compile_check
from .devices import CompileSlots, DevicePool
from .frontier import speedups
from .hooks import GateOutcome, Hooks
from .workspace import Workspace

MAX_READ_CHARS = 50_000

SPECS: dict[str, dict] = {
    "list_files": {
        "description": "List the candidate's source files (size, lines), its template point, the files changed "
                       "from that point, and the other paths read_file accepts.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    "read_file": {
        "description": "Read a file whole or a line range. Paths: NAME or candidate/NAME (this candidate), "
                       "parent/NAME, template/NAME (the Jinja template files), definition/reference.py, "
                       "definition/definition.json, definition/workloads.txt, evidence/committed.md, "
                       "skills/NAME.md, references/NAME. Long files come in pieces: the reply says which lines it "
                       "holds.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1},
            "end_line": {"type": "integer", "minimum": 1}}, "required": ["path"], "additionalProperties": False}},
    "apply_patch": {
        "description": "Apply a unified diff to the candidate's flat source files (`--- a/NAME`, `+++ b/NAME`, "
                       "`@@ -l,s +l,s @@` hunks with exact context lines; /dev/null creates or deletes a file). "
                       "All hunks apply or nothing changes.",
        "parameters": {"type": "object", "properties": {"diff": {"type": "string"}}, "required": ["diff"],
                       "additionalProperties": False}},
    "render_template": {
        "description": "Render a point of the template's parameter space into the candidate, replacing every "
                       "file (earlier patches are discarded). Parameters not given keep their current value.",
        "parameters": {"type": "object", "properties": {"params": {"type": "object"}}, "required": ["params"],
                       "additionalProperties": False}},
    "compile": {
        "description": "Compile every .cu file of the candidate with nvcc for sm_90a; returns the first error and "
                       "the log tail, or per kernel the registers, spill bytes and static shared memory (ptxas).",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    "gate": {
        "description": "Correctness gate (FlashInfer-Bench rules, fresh random inputs per trial) on workloads given "
                       "by uuid prefix (default: the run's selected workloads). Returns a status per workload.",
        "parameters": {"type": "object", "properties": {
            "workloads": {"type": "array", "items": {"type": "string"}},
            "trials": {"type": "integer", "minimum": 1, "maximum": 10}}, "additionalProperties": False}},
    "bench": {
        "description": "Gate, then time the candidate (CUPTI medians, cold L2) with the PyTorch reference timed in "
                       "the same worker: latency, speedup vs reference and vs the parent per workload.",
        "parameters": {"type": "object", "properties": {
            "workloads": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False}},
    "profile": {
        "description": "Nsight Compute (SpeedOfLight, Occupancy, LaunchStats) on one workload (default: the "
                       "largest selected one), where ncu exists and may read the GPU counters.",
        "parameters": {"type": "object", "properties": {"workload": {"type": "string"}},
                       "additionalProperties": False}},
    "finish": {
        "description": "End work on this candidate. The loop then gates and times it on the run's workloads and "
                       "decides; call it when the sources are what you want evaluated.",
        "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"],
                       "additionalProperties": False}},
}
TYPES = {"string": str, "integer": int, "array": list, "object": dict, "boolean": bool}


def openai_specs(names: list[str] | None = None) -> list[dict]:
    return [{"type": "function", "function": {"name": n, **SPECS[n]}} for n in (names or SPECS)]


class ToolArgumentError(BadInputError):
    """The call itself is malformed (unknown tool, arguments that are not the declared JSON object)."""


def validate(name: str, arguments) -> dict:
    if name not in SPECS:
        raise ToolArgumentError(f"unknown tool {name!r}; the tools are {', '.join(SPECS)}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"{name}: arguments are not valid JSON ({exc})") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"{name}: arguments must be a JSON object")
    schema = SPECS[name]["parameters"]
    unknown = set(arguments) - set(schema["properties"])
    missing = set(schema.get("required", [])) - set(arguments)
    if unknown or missing:
        raise ToolArgumentError(f"{name}: unknown {sorted(unknown)}, missing {sorted(missing)}")
    for key, value in arguments.items():
        kind = schema["properties"][key]["type"]
        if not isinstance(value, TYPES[kind]) or (kind == "integer" and isinstance(value, bool)):
            raise ToolArgumentError(f"{name}: {key} must be {kind}")
        if kind == "array" and not all(isinstance(v, str) for v in value):
            raise ToolArgumentError(f"{name}: {key} must be a list of strings")
    return arguments


@dataclass
class ToolResult:
    ok: bool
    text: str
    data: dict = field(default_factory=dict)


@dataclass
class ToolEnv:
    """What the tools need besides the workspace: the definition's run state and the machines."""
    definition: str
    template: str
    templates_root: Path
    selected: list
    hooks: Hooks
    pool: DevicePool
    compile_slots: CompileSlots
    trials: int = 3
    seed: int = 0
    cpu_gate: bool = False
    gpu: str | None = None
    compile_mode: str = "auto"
    skills_root: Path | None = None
    ledger: object | None = None
    all_workloads: list = field(default_factory=list)
    references: dict = field(default_factory=dict)   # name -> text of the humans' reference files

    def __post_init__(self):
        if not self.all_workloads:
            try:
                self.all_workloads = list(self.hooks.all_workloads(self.definition))
            except Exception:  # a test definition without official workloads
                self.all_workloads = list(self.selected)


def _key(workloads: list) -> tuple:
    return tuple(w.uuid for w in workloads)


class ToolBox:
    def __init__(self, workspace: Workspace, env: ToolEnv, source: str = "model"):
        self.ws, self.env, self.source = workspace, env, source
        self.parent_bench: list[dict] = []
        self.first_bench: list[dict] = []

    # ----- dispatch -----------------------------------------------------------------------------------------
    def call(self, name: str, arguments, call_id: str | None = None) -> ToolResult:
        """Validate and run one tool call; a malformed call raises ToolArgumentError (nothing ran)."""
        args = validate(name, arguments)
        started = time.time()
        with self.ws.lock:
            try:
                result = getattr(self, f"_{name}")(**args)
            except BadInputError as exc:  # a patch that does not apply, params outside the space, ...
                result = ToolResult(False, f"error: {exc}")
        if self.env.ledger is not None:
            self.env.ledger.tool(name=name, call_id=call_id, definition=self.env.definition,
                                 candidate_id=self.ws.id, t_start=started, t_end=time.time(), ok=result.ok,
                                 summary=result.text.splitlines()[0] if result.text else "", source=self.source)
        return result

    # ----- reading ------------------------------------------------------------------------------------------
    def _list_files(self) -> ToolResult:
        files = self.ws.files()
        lines = [f"candidate {self.ws.id} (parent {self.ws.parent_id or '-'}), template {self.ws.template} params "
                 f"{json.dumps(self.ws.params, sort_keys=True)}; changed from that point: "
                 f"{', '.join(self.ws.changed_files()) or 'nothing'}"]
        lines += [f"- {n}: {len(t)} chars, {t.count(chr(10))} lines" for n, t in files.items()]
        skills = sorted(p.stem for p in Path(self.env.skills_root).glob("*.md") if p.name != "README.md") \
            if self.env.skills_root else []
        lines.append("Other paths: parent/NAME, template/NAME (" + ", ".join(self._template_files()) + "), "
                     "definition/reference.py, definition/definition.json, definition/workloads.txt, "
                     "evidence/committed.md, skills/NAME.md (" + ", ".join(skills) + ")"
                     + (", references/NAME (" + ", ".join(self.env.references) + ")" if self.env.references else ""))
        return ToolResult(True, "\n".join(lines), {"files": sorted(files)})

    def _template_files(self) -> list[str]:
        folder = self.ws.spec["folder"]
        names = {p.name for p in folder.iterdir() if p.is_file()}
        names |= {Path(s).name for s in self.ws.spec["files"].values()}
        return sorted(names)

    def _resolve(self, path: str) -> str:
        space, _, rest = path.partition("/")
        if not rest:
            space, rest = "candidate", path
        if space == "candidate":
            files = self.ws.files()
        elif space == "parent":
            files = self.ws.parent_files
        elif space == "template":
            folder = self.ws.spec["folder"]
            sources = {Path(s).name: folder / s for s in self.ws.spec["files"].values()}
            target = sources.get(rest, folder / rest)
            if "/" in rest or rest.startswith(".") or not target.is_file():
                raise BadInputError(f"template/{rest}: no such template file ({', '.join(self._template_files())})")
            return target.read_text()
        elif space == "definition":
            texts = {"reference.py": lambda: defs.reference_source(self.env.definition),
                     "definition.json": lambda: json.dumps(defs.load(self.env.definition).model_dump(
                         mode="json", exclude={"reference"}, exclude_none=True), indent=1) + "\n",
                     "workloads.txt": lambda: brief.workloads_listing(self.env.all_workloads)}
            if rest not in texts:
                raise BadInputError(f"definition/{rest}: use reference.py, definition.json or workloads.txt")
            return texts[rest]()
        elif space == "evidence" and rest == "committed.md":
            section = brief.committed_evidence(self.env.definition, [], every_row=True)
            return section.body + "\n" if section else "no committed GPU measurements for this definition\n"
        elif space == "references":
            if rest not in self.env.references:
                raise BadInputError(f"references/{rest}: no such reference ({', '.join(self.env.references) or 'none'})")
            return self.env.references[rest]
        elif space == "skills" and self.env.skills_root is not None:
            target = Path(self.env.skills_root) / rest
            if "/" in rest or not rest.endswith(".md") or not target.is_file():
                raise BadInputError(f"skills/{rest}: no such skill")
            return target.read_text()
        else:
            raise BadInputError(f"{path}: unknown path (see list_files)")
        if rest not in files:
            raise BadInputError(f"{path}: no such file ({', '.join(sorted(files)) or 'none'})")
        return files[rest]

    def _read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> ToolResult:
        lines = self._resolve(path).splitlines(keepends=True)
        total = len(lines)
        end = min(total, end_line or total)
        if start_line < 1 or start_line > max(total, 1) or end < start_line - (total == 0):
            raise BadInputError(f"{path} has {total} lines: lines {start_line}-{end_line or 'end'} are not in it")
        out, size, last = [], 0, start_line - 1
        for number in range(start_line, end + 1):
            line = lines[number - 1]
            if out and size + len(line) > MAX_READ_CHARS:
                break
            out.append(line)
            size += len(line)
            last = number
        more = f"; lines {last + 1}-{end} not sent (over {MAX_READ_CHARS} chars): call again with " \
               f"start_line={last + 1}" if last < end else ""
        head = f"`{path}`: lines {start_line}-{last} of {total}{more}\n"
        return ToolResult(True, head + "".join(out), {"path": path, "first": start_line, "last": last,
                                                       "total": total})

    # ----- changing the candidate ---------------------------------------------------------------------------
    def _apply_patch(self, diff: str) -> ToolResult:
        report = self.ws.patch(diff)
        return ToolResult(True, "patch applied:\n" + "\n".join(f"- {line}" for line in report)
                          + f"\nsources sha256 {self.ws.digest()[:16]}", {"files": report})

    def _render_template(self, params: dict) -> ToolResult:
        point = {**self.ws.params, **params}
        self.ws.render(point)
        return ToolResult(True, f"rendered templates/{self.ws.template} at {json.dumps(point, sort_keys=True)}; "
                                f"every file replaced (earlier edits discarded); sources sha256 "
                                f"{self.ws.digest()[:16]}", {"params": point})

    # ----- building and measuring ---------------------------------------------------------------------------
    def compile_result(self):
        digest = self.ws.digest()
        key = ("compile", digest)
        if key not in self.ws.cache:
            with self.env.compile_slots.acquire():
                self.ws.cache[key] = compile_check(self.ws.source_dir, self.ws.folder / "build")
            (self.ws.folder / "build.log").write_text(self.ws.cache[key].log or (self.ws.cache[key].skipped or "")
                                                      + "\n")
        return self.ws.cache[key]

    def _compile(self) -> ToolResult:
        if self.env.compile_mode == "never":
            return ToolResult(True, "compile check disabled for this run (--compile-check never)")
        build = self.compile_result()
        if build.skipped:
            return ToolResult(True, f"compile check skipped: {build.skipped}", {"skipped": build.skipped})
        kernels = "\n".join(f"- {k['kernel']}: {k['registers']} registers, {k['spill_bytes']} B spills, "
                            f"{k['smem_bytes']} B static smem" for k in build.kernels) or "- no kernels reported"
        if not build.ok:
            return ToolResult(False, f"compile FAILED for sm_90a: {build.first_error()}\nlog tail:\n"
                                     f"{build.log[-4000:]}", {"ok": False})
        return ToolResult(True, f"compiled for sm_90a (nvcc -gencode=arch=compute_90a,code=sm_90a):\n{kernels}",
                          {"ok": True, "kernels": build.kernels})

    def resolve_workloads(self, keys: list[str] | None) -> list:
        if not keys:
            return list(self.env.selected)
        pool = list(self.env.selected) + [w for w in self.env.all_workloads
                                          if w.uuid not in {s.uuid for s in self.env.selected}]
        chosen = []
        for key in keys:
            hits = [w for w in pool if w.uuid.startswith(key) or w.uuid.replace("-", "").startswith(key)]
            if len(hits) != 1:
                raise BadInputError(f"workload {key!r} matches {len(hits)} workloads (see definition/workloads.txt)")
            chosen.append(hits[0])
        return chosen

    def gate_outcome(self, workloads: list, trials: int, timed: bool) -> GateOutcome:
        key = ("bench" if timed else "gate", self.ws.digest(), _key(workloads), trials)
        if key in self.ws.cache:
            return self.ws.cache[key]
        if timed and ("gate", key[1], key[2], trials) in self.ws.cache and \
                self.ws.cache[("gate", key[1], key[2], trials)].status != "PASSED":
            return self.ws.cache[("gate", key[1], key[2], trials)]  # failed already on these bytes: not again
        with self.env.pool.acquire() as device:
            try:
                outcome = self.env.hooks.gate(self.ws.solution(), self.env.definition, workloads, trials=trials,
                                              seed=self.env.seed, timed=timed, device=device)
            except Exception as exc:  # the gate reports failures as statuses; an exception is a failure too
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else type(exc).__name__
                outcome = GateOutcome("FAILED", reason=reason)
        self.ws.cache[key] = outcome
        if timed and outcome.status == "PASSED":  # a timed gate is a gate too
            self.ws.cache[("gate", key[1], key[2], trials)] = outcome
        return outcome

    def _where(self) -> str | None:
        if self.env.gpu:
            return None
        if self.env.cpu_gate:
            return "cpu (torch fallback: the CUDA kernels did not run)"
        return "not gated: no GPU (a run started with --cpu-gate gates the torch fallback on the CPU)"

    def _gate(self, workloads: list[str] | None = None, trials: int | None = None) -> ToolResult:
        where = self._where()
        if where and where.startswith("not gated"):
            return ToolResult(False, where)
        chosen = self.resolve_workloads(workloads)
        outcome = self.gate_outcome(chosen, trials or self.env.trials, timed=False)
        rows = "\n".join(f"- {r['workload'][:8]}: {r['status']} {r.get('reason') or ''}".rstrip() +
                         (f" (max_abs {r['max_abs']:.3g})" if isinstance(r.get("max_abs"), float) else "")
                         for r in outcome.rows)
        head = f"gate {outcome.status}" + (f": {outcome.reason}" if outcome.reason else "") + \
               (f" [{where}]" if where else "")
        return ToolResult(outcome.status == "PASSED", f"{head}\n{rows}",
                          {"status": outcome.status, "rows": outcome.rows})

    def _bench(self, workloads: list[str] | None = None) -> ToolResult:
        if not self.env.gpu:
            return ToolResult(False, "not timed: no GPU on this machine (CPU timings of the torch fallback would "
                                     "say nothing about the CUDA kernels)")
        chosen = self.resolve_workloads(workloads)
        outcome = self.gate_outcome(chosen, self.env.trials, timed=True)
        if outcome.status != "PASSED":
            return ToolResult(False, f"not timed: gate {outcome.status} ({outcome.reason})",
                              {"status": outcome.status, "rows": outcome.rows})
        if not outcome.timings:
            return ToolResult(False, "gate PASSED but the gate returned no timings", {"status": outcome.status})
        score = speedups(outcome.timings, self.parent_bench, self.first_bench)
        parent = {r["workload"]: r["latency_ms"] for r in self.parent_bench}
        lines = [f"bench ({outcome.timings[0].get('method')}): mean {score['latency_ms']} ms; speedup vs reference "
                 f"{score['speedup_vs_reference']}, vs parent {score['speedup_vs_parent']}"]
        for r in outcome.timings:
            ref = f", reference {r['reference_ms']:.4g} ms ({r['reference_ms'] / r['latency_ms']:.2f}x)" \
                if r.get("reference_ms") else ""
            par = f", parent {parent[r['workload']]:.4g} ms" if r["workload"] in parent else ""
            lines.append(f"- {r['workload'][:8]}: {r['latency_ms']:.4g} ms{ref}{par}")
        return ToolResult(True, "\n".join(lines), {"rows": outcome.timings, **score})

    def _profile(self, workload: str | None = None) -> ToolResult:
        if not self.env.gpu:
            return ToolResult(False, "ncu unavailable: no GPU on this machine")
        chosen = self.resolve_workloads([workload]) if workload else \
            [max(self.env.selected, key=lambda w: sum(int(v) for v in w.axes.values()))]
        with self.env.pool.acquire() as device:
            try:
                text = self.env.hooks.profile(self.ws.package_dir, self.env.definition, chosen[0], self.ws.folder,
                                              device=device)
            except Exception as exc:  # missing counter permission, timeouts
                return ToolResult(False, f"ncu failed: {type(exc).__name__}: {str(exc)[:300]}")
        if not text:
            return ToolResult(False, "ncu unavailable here (not installed or no GPU): use bench and the ptxas "
                                     "report from compile")
        return ToolResult(True, f"ncu on {chosen[0].uuid[:8]} (tail):\n{text[-6000:]}")

    def _finish(self, summary: str) -> ToolResult:
        self.ws.finished = summary or "finished"
        return ToolResult(True, "finished: the loop now gates and times this candidate on the run's workloads")
