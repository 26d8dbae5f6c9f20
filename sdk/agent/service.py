"""The SDK's tools for an external coding agent, with lineage: what `fib-sdk mcp` serves (sdk.agent.mcp_server).

An agent starts a candidate (on a parent from this run, or the template's default point), works on it with the
same tools a model session has (read, patch, render, compile, gate, bench, profile), and finishes it; finishing
runs the same pipeline the loop runs (scan, compile, gate on the run's workloads, timing on a GPU) and the same
decision rules, appends the candidate to `candidates.jsonl`, keeps a frontier per definition and promotes each
new best into `RUN/promoted/`. Every tool call is an `execute_tool` event in the run's ledger, so the agent's own
token usage can later be attributed to candidates (`fib-sdk ledger RUN --import-otel EXPORT`).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

from .. import definitions as defs
from .. import render
from ..errors import BadInputError
from . import brief as brief_mod
from . import candidate as cand
from . import jsonl
from . import policy as pol
from . import skills as sk
from .devices import CompileSlots, DevicePool
from .frontier import Frontier, rule_decision
from .hooks import Hooks
from .ledger import Ledger
from .loop import DefinitionState, resolve_template, RunConfig
from .pipeline import finalize, score
from .tools import SPECS, ToolBox, ToolEnv
from .workspace import Workspace

CANDIDATE_TOOLS = [n for n in SPECS if n != "finish"]


class AgentService:
    def __init__(self, run_dir: Path, *, hooks: Hooks | None = None, config: RunConfig | None = None,
                 agent: str = "mcp-client"):
        self.config = config or RunConfig(run_dir=Path(run_dir))
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.hooks = hooks or Hooks(workloads_file=self.config.workloads_file)
        self.agent = agent
        self.ledger = Ledger(self.run_dir, uuid.uuid4().hex)
        self.lineage_path = self.run_dir / "candidates.jsonl"
        self.counter = len(jsonl.read(self.lineage_path))
        self.policy = pol.load(self.config.policy)
        self.skills = sk.load(self.config.skills_root)
        self.gpu = self.hooks.gpu()
        self.pool = DevicePool(self.hooks.devices())
        self.compile_slots = CompileSlots(self.config.compile_jobs)
        self.states: dict[str, DefinitionState] = {}
        self.envs: dict[str, ToolEnv] = {}
        self.boxes: dict[str, ToolBox] = {}
        self.lock = threading.RLock()
        self.ledger.event("mcp_start", agent=agent, gpu=self.gpu, devices=self.pool.devices,
                          cpu_gate=self.config.cpu_gate)
        (self.run_dir / "run.json").write_text(json.dumps({
            "run_id": self.ledger.run_id, "backend": f"mcp:{agent}", "config": self.config.manifest(),
            "gpu": self.gpu, "devices": self.pool.devices, "skills_digest": sk.set_digest(self.skills)},
            indent=1, default=str) + "\n")

    # ----- per definition -----------------------------------------------------------------------------------
    def state(self, definition: str) -> DefinitionState:
        with self.lock:
            if definition not in self.states:
                if definition not in defs.names():
                    raise BadInputError(f"unknown definition {definition!r}; known: {', '.join(defs.names())}")
                template = resolve_template(definition, self.config)
                state = DefinitionState(definition, template, render.load_template(template,
                                                                                   self.config.templates_root),
                                        render.template_digest(template, self.config.templates_root),
                                        frontier=Frontier(self.config.frontier))
                state.workloads = self.hooks.workloads(definition, self.config.workloads or None,
                                                       self.config.workload_count)
                self.states[definition] = state
                self.envs[definition] = ToolEnv(
                    definition=definition, template=template, templates_root=self.config.templates_root,
                    selected=state.workloads, hooks=self.hooks, pool=self.pool, compile_slots=self.compile_slots,
                    trials=self.config.trials, seed=self.config.seed, cpu_gate=self.config.cpu_gate, gpu=self.gpu,
                    compile_mode=self.config.compile_check, skills_root=self.config.skills_root, ledger=self.ledger)
            return self.states[definition]

    def task(self, definition: str, budget: int | None = None) -> str:
        state = self.state(definition)
        best = state.best
        folder = self.run_dir / "candidates" / best["id"] if best else None
        sources = state.workspaces[best["id"]].files() if best else render.render_files(
            state.template, render.default_params(state.template, self.config.templates_root),
            self.config.templates_root)
        chosen = sk.select(self.skills, "coder", state.template)
        text = brief_mod.task_brief(
            definition, all_workloads=self.envs[definition].all_workloads, selected=state.workloads, skills=chosen,
            sources=sources, sources_label=f"{best['id']}" if best else "template default", best=best,
            gate_rows=_json(folder, "gate.json", {}).get("rows", []), bench_rows=_json(folder, "bench.json", []),
            budget=budget or self.config.prompt_chars, policy=self.policy.text)
        where = (f"GPU: {self.gpu}" if self.gpu else "no GPU here: gate runs the CPU torch fallback, bench is "
                 "refused" if self.config.cpu_gate else "no GPU here: gate and bench are refused")
        space = json.dumps(state.spec["space"])
        return (f"# Task: {definition} (template `{state.template}`, parameter space {space}; {where})\n\n"
                "Start a candidate with start_candidate, change it (apply_patch / render_template), check it "
                "(compile, gate, bench) and end it with finish_candidate; the SDK gates and decides.\n\n" + text)

    # ----- candidates ---------------------------------------------------------------------------------------
    def start_candidate(self, definition: str, parent: str | None = None, note: str = "") -> dict:
        state = self.state(definition)
        with self.lock:
            parent_record = next((r for r in state.records if r["id"] == parent), None)
            if parent is not None and (parent_record is None or parent not in state.workspaces):
                raise BadInputError(f"parent {parent!r} is not a candidate of {definition} in this run "
                                    f"({', '.join(r['id'] for r in state.records) or 'none yet'})")
            self.counter += 1
            cid = f"c{self.counter:04d}"
        folder = self.run_dir / "candidates" / cid
        ws = Workspace(folder, candidate_id=cid, definition=definition, template=state.template,
                       templates_root=self.config.templates_root, parent=state.workspaces.get(parent),
                       parent_id=parent)
        (folder / "plan.md").write_text(f"external agent {self.agent}: {note}\n")
        state.workspaces[cid] = ws
        box = ToolBox(ws, self.envs[definition], source=f"mcp:{self.agent}")
        parent_dir = self.run_dir / "candidates" / parent if parent else None
        box.parent_bench = _json(parent_dir, "bench.json", []) if parent else []
        box.first_bench = list(state.first_bench)
        self.boxes[cid] = box
        self.ledger.tool(name="start_candidate", call_id=None, definition=definition, candidate_id=cid,
                         t_start=time.time(), t_end=time.time(), ok=True, summary=f"parent {parent}",
                         source=f"mcp:{self.agent}")
        return {"candidate": cid, "parent": parent, "params": ws.params, "files": sorted(ws.files())}

    def box(self, candidate: str) -> ToolBox:
        if candidate not in self.boxes:
            raise BadInputError(f"unknown candidate {candidate!r} (start one with start_candidate)")
        box = self.boxes[candidate]
        if box.ws.finished is not None:
            raise BadInputError(f"candidate {candidate} is finished; start a new one with parent={candidate!r}")
        return box

    def tool(self, candidate: str, name: str, arguments: dict) -> str:
        if name not in CANDIDATE_TOOLS:
            raise BadInputError(f"unknown tool {name!r}")
        result = self.box(candidate).call(name, {k: v for k, v in arguments.items() if v is not None})
        return result.text

    def finish_candidate(self, candidate: str, summary: str) -> dict:
        box = self.box(candidate)
        box.ws.finished = summary or "finished"
        definition = box.ws.definition
        state = self.state(definition)
        with self.lock:  # decisions one at a time, in the order agents finish
            parent = next((r for r in state.records if r["id"] == box.ws.parent_id), None)
            final = finalize(box, self.policy, state.records)
            rows = final.pop("bench_rows", None)
            record = {"id": candidate, "parent": box.ws.parent_id, "definition": definition,
                      "iteration": len(state.records) + 1, "template": state.template,
                      "template_sha": state.template_sha, "direction": summary, "solution_name": box.ws.name,
                      "agent": f"mcp:{self.agent}", "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      **final}
            if rows:
                record.update(score(rows, box.parent_bench, state.first_bench or rows))
                if not state.first_bench:
                    state.first_bench = rows
            record.update(rule_decision(record, state.best, self.config.min_gain, parent=parent,
                                        frontier_floor=state.frontier.floor()))
            (box.ws.folder / "decision.json").write_text(json.dumps(
                {"decision": record["decision"], "reason": record["reason"]}, indent=1) + "\n")
            if record["decision"] == "accept":
                new_best = state.best is None or record["speedup"] > state.best["speedup"]
                state.frontier.add(record)
                if new_best:
                    self._promote(state, record)
            jsonl.append(self.lineage_path, record)
            state.records.append(record)
        self.ledger.tool(name="finish_candidate", call_id=None, definition=definition, candidate_id=candidate,
                         t_start=time.time(), t_end=time.time(), ok=True,
                         summary=f"{record['decision']}: {record['reason']}", source=f"mcp:{self.agent}")
        return {k: record.get(k) for k in ("id", "parent", "decision", "reason", "statuses", "latency_ms",
                                           "speedup", "speedup_basis", "speedup_vs_reference", "speedup_vs_parent",
                                           "overlay_files", "sources_sha256")}

    def _promote(self, state: DefinitionState, record: dict) -> None:
        folder = self.run_dir / "candidates" / record["id"]
        evidence = {"run_id": self.ledger.run_id, "candidate": record, "agent": f"mcp:{self.agent}", "gpu": self.gpu,
                    "workloads": [w.uuid for w in state.workloads], "trials": self.config.trials,
                    "gate": _json(folder, "gate.json", {}), "bench": _json(folder, "bench.json", [])}
        dest = cand.promote(record, folder / "package", self.run_dir / "promoted", state.template, evidence)
        state.promoted = str(dest)

    def candidates(self, definition: str | None = None) -> list[dict]:
        records = jsonl.read(self.lineage_path)
        keys = ("id", "parent", "definition", "decision", "reason", "latency_ms", "speedup", "speedup_vs_reference",
                "speedup_vs_parent", "overlay_files", "agent")
        open_ = [{"id": cid, "definition": b.ws.definition, "parent": b.ws.parent_id, "decision": "in progress"}
                 for cid, b in self.boxes.items() if b.ws.finished is None
                 and (definition is None or b.ws.definition == definition)]
        return [{k: r.get(k) for k in keys} for r in records
                if definition is None or r.get("definition") == definition] + open_


def _json(folder: Path | None, name: str, default):
    path = folder / name if folder else None
    return json.loads(path.read_text()) if path and path.exists() else default
