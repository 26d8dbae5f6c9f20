"""The agent loop: per definition, rounds of planner -> coder tool sessions (several candidates in flight) ->
pipeline -> profiler -> evaluator; every model call in the ledger, every tool run as an event, every candidate in
the lineage; the best gated candidate is promoted.

A round plans `parallel` candidates, each on a parent taken from the frontier (the best accepted candidates, not
one greedy chain). Their coder sessions run concurrently: each works through the SDK's tools (read, patch,
render, compile, gate, bench, profile, finish); compiles run in parallel and gate/bench calls take one GPU each.
Then every finished candidate goes through the same pipeline (sdk.agent.pipeline) and is decided in candidate
order, so lineage and decisions do not depend on thread timing. The decision rules are hard: only a candidate
that passed the gate on every selected workload and was timed can be accepted; a model evaluator may downgrade
an accept, never upgrade anything else. Budgets (tokens, wall time, per-candidate turns and tokens) are checked
before every model call.

Run folder:
  run.json             manifest (config, backend, skills digest, policy, templates, workloads, stop reasons)
  ledger.jsonl         one line per model call / tool run / human input / event (sdk.agent.ledger)
  calls/<seq>.json     each call's new messages and the reply with its tool calls (what replay reads)
  candidates.jsonl     lineage, one line per candidate
  candidates/<id>/     plan.md, session.json, package/, patches/, scan.json, build.log, gate.json, bench.json,
                       profile.md, decision.json
  redirect.md          (optional, written by a human while the run goes) read at the start of every round
  promoted/<name>/     the promoted solution with render.toml (pure template points) and evidence.json
"""
from __future__ import annotations

import json
import platform
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import definitions, render
from ..errors import BadInputError
from . import backends as B
from . import brief as brief_mod
from . import candidate as cand
from . import jsonl, parse, prompting
from . import policy as pol
from . import skills as sk
from .devices import CompileSlots, DevicePool
from .frontier import Frontier, rule_decision  # noqa: F401  (rule_decision: part of this module's API)
from .hooks import Hooks
from .ledger import Ledger, Usage, sha256, summarize
from .pipeline import blank_record, finalize, score
from .session import Budgets, RunBudgetExhausted, SessionLimits, ToolSession, estimate_tokens
from .tools import ToolBox, ToolEnv
from .workspace import Workspace

DEFAULT_TEMPLATES = {
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": "fused_moe",
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": "dsa_topk_indexer",
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": "dsa_sparse_attention",
}
REFERENCE_CHARS = 8_000    # a human reference file longer than this is handed to the roles as a read_file path
MODEL_BACKENDS = ("litellm", "scripted")


@dataclass
class RunConfig:
    run_dir: Path
    definitions: list[str] = field(default_factory=list)
    backend: str = "offline"
    model: str | None = None
    seed: int = 0
    max_iters: int = 6                 # candidates per definition
    budget_tokens: int | None = None
    budget_wall_s: float | None = None
    template: str | None = None
    templates_root: Path = render.TEMPLATES
    workloads: list[str] = field(default_factory=list)
    workload_count: int = 4
    workloads_file: Path | None = None  # workloads JSONL instead of the official set
    trials: int = 3
    policy: Path | None = None
    references: list[Path] = field(default_factory=list)
    redirect: Path | None = None
    promote_to: Path | None = None
    promote_name: str | None = None
    min_gain: float = 0.02
    plateau: int = 3
    compile_check: str = "auto"       # auto (only without a GPU) | always | never
    profile: bool = False
    replay_from: Path | None = None
    timeout_s: float = 180.0           # deadline of one model call, retries included
    max_retries: int = 3
    retry_backoff_s: float = 2.0       # first back-off; doubles per retry
    skills_root: Path = sk.SKILLS
    api_base: str | None = None
    script: Path | None = None         # --backend scripted
    parallel: int = 1                  # candidates in flight per round
    frontier: int = 3
    max_turns: int = 12                # model turns per candidate
    candidate_tokens: int | None = None
    max_output_tokens: int | None = 8192
    prompt_chars: int = brief_mod.DEFAULT_CHARS
    cpu_gate: bool = False             # without a GPU, gate the torch fallback on the CPU
    compile_jobs: int = 2
    temperature: float | None = 0.2

    def manifest(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=str))


class StopRun(Exception):
    """Ends the work on the current definition (budget, human stop, failed model call)."""


@dataclass
class DefinitionState:
    definition: str
    template: str
    spec: dict
    template_sha: str
    workloads: list = field(default_factory=list)
    records: list = field(default_factory=list)
    visited: set = field(default_factory=set)
    frontier: Frontier = field(default_factory=Frontier)
    first_bench: list = field(default_factory=list)
    workspaces: dict = field(default_factory=dict)
    non_improving: int = 0
    failures: int = 0
    research_note: str = ""
    jump: bool = False
    profile_summary: str = ""
    stop_reason: str = ""
    promoted: str | None = None

    @property
    def best(self) -> dict | None:
        return self.frontier.best


def make_backend(config: RunConfig) -> object:
    if config.backend == "offline":
        return B.OfflineBackend(config.seed)
    if config.backend == "litellm":
        return B.LiteLLMBackend(config.model or "", timeout_s=config.timeout_s, max_retries=config.max_retries,
                                backoff_s=config.retry_backoff_s, seed=config.seed, api_base=config.api_base,
                                temperature=config.temperature)
    if config.backend == "scripted":
        if config.script is None:
            raise BadInputError("the scripted backend needs --script FILE (see sdk/agent/script.py)")
        return B.ScriptedBackend(config.script, timeout_s=config.timeout_s)
    if config.backend == "replay":
        if config.replay_from is None:
            raise BadInputError("the replay backend needs the recorded run folder (--replay-from RUN_DIR)")
        return B.ReplayBackend(config.replay_from)
    raise BadInputError(f"unknown backend {config.backend!r}; use offline, litellm, scripted or replay")


def resolve_template(definition: str, config: RunConfig) -> str:
    if config.template:
        return config.template
    root = Path(config.templates_root)
    for path in sorted(root.glob("*/template.toml")):
        if render.load_template(path.parent.name, root).get("definition") == definition:
            return path.parent.name
    name = DEFAULT_TEMPLATES.get(definition)
    if name and (root / name / "template.toml").exists():
        return name
    raise BadInputError(f"no template for {definition} under {root} (declare definition = ... in a "
                        f"template.toml or pass --template)")


def canonical(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True, separators=(",", ":"))


class Loop:
    def __init__(self, config: RunConfig, hooks: Hooks | None = None, backend=None):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.hooks = hooks or Hooks(workloads_file=config.workloads_file)
        self.backend = backend or make_backend(config)
        self.run_id = uuid.uuid4().hex
        self.ledger = Ledger(self.run_dir, self.run_id)
        self.lineage_path = self.run_dir / "candidates.jsonl"
        self.counter = len(jsonl.read(self.lineage_path))
        self.policy = pol.load(config.policy)
        self.skills = sk.load(config.skills_root)
        self.references: list[dict] = []
        self.reference_texts: dict[str, str] = {}
        self.redirect_path = Path(config.redirect) if config.redirect else self.run_dir / "redirect.md"
        self.redirect_sha, self.redirect_text, self.directives = None, "", {}
        self.gpu = self.hooks.gpu()
        self.pool = DevicePool(self.hooks.devices())
        self.compile_slots = CompileSlots(config.compile_jobs)
        self.budgets = Budgets(self.ledger.tokens_used, config.budget_tokens, config.budget_wall_s,
                               max_output_tokens=config.max_output_tokens)
        self.states: list[DefinitionState] = []

    # ----- human inputs -------------------------------------------------------------------------------------
    def _record_inputs(self) -> None:
        text = self.policy.raw or "\n".join(self.policy.text + [f"{r.id}: {r.pattern}" for r in self.policy.rules])
        self.ledger.human_input(kind="policy", source=self.policy.source, text=text, iteration=0, definition=None)
        for path in self.config.references:
            try:
                body = Path(path).read_text()
            except OSError as exc:
                raise BadInputError(f"{path}: cannot read reference ({exc})") from None
            self.ledger.human_input(kind="reference", source=str(path), text=body, iteration=0, definition=None)
            name = Path(path).name
            self.reference_texts[name] = body
            self.references.append({"name": name, "chars": len(body),
                                    "text": body if len(body) <= REFERENCE_CHARS else None})

    def _read_redirect(self, state: DefinitionState, iteration: int) -> None:
        if not self.redirect_path.exists():
            return
        text = self.redirect_path.read_text()
        if sha256(text) == self.redirect_sha:
            return
        self.redirect_sha, self.redirect_text = sha256(text), text.strip()
        self.ledger.human_input(kind="redirect", source=str(self.redirect_path), text=text, iteration=iteration,
                                definition=state.definition)
        try:
            self.directives = parse.json_payload(text) if "```json" in text else {}
        except BadInputError:
            self.directives = {}
        if self.directives.get("stop"):
            raise StopRun(f"stopped by the redirect note: {self.directives['stop']}")

    # ----- model calls --------------------------------------------------------------------------------------
    def _record(self, *, request: B.Request, state: DefinitionState, iteration: int, t_start: float,
                reply: B.Reply | None = None, error: B.ModelCallError | None = None, skills=(),
                template_ref: dict | None = None, new_messages: list | None = None, estimate: int | None = None):
        common = dict(role=request.role, phase=request.phase, definition=state.definition,
                      candidate_id=request.candidate_id, iteration=iteration, backend=self.config.backend,
                      prompt=request.prompt, prompt_template=template_ref, skills=[s.ref() for s in skills],
                      temperature=getattr(self.backend, "temperature", None), seed=self.config.seed,
                      turn=request.turn if request.messages is not None else None, new_messages=new_messages,
                      tools=[t["function"]["name"] for t in request.tools] if request.tools else None,
                      prompt_estimate=estimate)
        if error is not None:
            self.ledger.call(**common, provider=getattr(self.backend, "provider", self.config.backend),
                             model=getattr(self.backend, "model", "?"), response="", usage=Usage(), cost_usd=None,
                             cost_source="none: call failed", t_start=t_start, t_end=time.time(),
                             retries=error.retries, error_type=error.error_type)
            return
        self.ledger.call(**common, provider=reply.provider, model=reply.model, response=reply.text,
                         usage=reply.usage, cost_usd=reply.cost_usd, cost_source=reply.cost_source,
                         t_start=t_start, t_end=time.time(), response_model=reply.response_model,
                         response_id=reply.response_id, finish_reasons=reply.finish_reasons, retries=reply.retries,
                         extra=reply.extra, message=reply.message())

    def _call(self, role: str, phase: str, state: DefinitionState, iteration: int, candidate_id: str | None,
              context: dict, events: set = frozenset(), requested: set = frozenset()) -> tuple[str, dict]:
        """One text-role call (planner, profiler, evaluator, researcher) answered with a ```json block."""
        chosen = sk.select(self.skills, role, state.template, set(events), set(requested))
        prompt, template_ref = prompting.render(role, {**context, "skills": chosen})
        request = B.Request(role, phase, prompt, context, candidate_id=candidate_id)
        estimate = estimate_tokens(request.chat_messages())
        ticket = object()
        try:
            request.max_tokens = self.budgets.reserve(ticket, estimate)
        except RunBudgetExhausted as exc:
            raise StopRun(str(exc)) from None
        t_start = time.time()
        try:
            try:
                reply = self.backend.complete(request)
            except B.ModelCallError as exc:
                self._record(request=request, state=state, iteration=iteration, t_start=t_start, error=exc,
                             skills=chosen, template_ref=template_ref, estimate=estimate)
                raise StopRun(f"{role} call failed: {exc}") from None
            self._record(request=request, state=state, iteration=iteration, t_start=t_start, reply=reply,
                         skills=chosen, template_ref=template_ref, estimate=estimate)
        finally:
            self.budgets.release(ticket)  # after the usage is in the ledger
        try:
            payload = parse.json_payload(reply.text)
        except BadInputError:
            payload = {}
        return reply.text, payload

    def _session_caller(self, state: DefinitionState, iteration: int, cid: str, context: dict, skills: list,
                        template_ref: dict):
        def caller(*, messages, tools, turn, new_messages, max_tokens, estimate):
            request = B.Request("coder", "tool-turn", canonical(messages), context, messages=messages, tools=tools,
                                candidate_id=cid, turn=turn, max_tokens=max_tokens)
            t_start = time.time()
            try:
                reply = self.backend.complete(request)
            except B.ModelCallError as exc:
                self._record(request=request, state=state, iteration=iteration, t_start=t_start, error=exc,
                             skills=skills, template_ref=template_ref, new_messages=new_messages, estimate=estimate)
                raise
            self._record(request=request, state=state, iteration=iteration, t_start=t_start, reply=reply,
                         skills=skills, template_ref=template_ref, new_messages=new_messages, estimate=estimate)
            return reply
        return caller

    # ----- state helpers ------------------------------------------------------------------------------------
    def _fallback_base(self, state: DefinitionState) -> tuple[dict | None, str | None]:
        """Without a frontier (nothing timed yet): the latest pure template point that compiled."""
        for record in reversed(state.records):
            if not record["overlay_files"] and record["statuses"].get("compile", "").startswith(("ok", "skipped")) \
                    and not record["statuses"].get("duplicate"):
                return record["params"], record["id"]
        return None, None

    def _events(self, state: DefinitionState) -> set:
        events = set()
        if state.records:
            last = state.records[-1]["statuses"]
            if str(last.get("compile", "")).startswith("failed"):
                events.add("build_error")
            if last.get("gate", "PASSED") not in ("PASSED",) and not str(last.get("gate", "")).startswith("not"):
                events.add("gate_failure")
        if any(r.get("speedup") is not None for r in state.records):
            events.add("timed")
        return events

    HISTORY_KEYS = ("id", "parent", "params", "overlay_files", "statuses", "latency_ms", "speedup", "speedup_basis",
                    "speedup_vs_reference", "speedup_vs_parent", "decision", "reason")

    def _history(self, state: DefinitionState) -> list[dict]:
        return [{k: r.get(k) for k in self.HISTORY_KEYS} for r in state.records]

    def _common_context(self, state: DefinitionState, iteration: int) -> dict:
        return {"definition": state.definition, "template": state.template, "template_sha": state.template_sha,
                "space": state.spec["space"], "template_toml": (state.spec["folder"] / "template.toml").read_text(),
                "iteration": iteration, "max_iters": self.config.max_iters,
                "policy_text": self.policy.text, "references": self.references, "gpu": self.gpu}

    def _env(self, state: DefinitionState) -> ToolEnv:
        return ToolEnv(definition=state.definition, template=state.template, templates_root=self.config.templates_root,
                       selected=state.workloads, hooks=self.hooks, pool=self.pool, compile_slots=self.compile_slots,
                       trials=self.config.trials, seed=self.config.seed, cpu_gate=self.config.cpu_gate, gpu=self.gpu,
                       compile_mode=self.config.compile_check, skills_root=self.config.skills_root, ledger=self.ledger,
                       references=self.reference_texts)

    def _record_of(self, state: DefinitionState, cid: str | None) -> dict | None:
        return next((r for r in state.records if r["id"] == cid), None)

    # ----- the loop -----------------------------------------------------------------------------------------
    def run(self) -> dict:
        names = self.config.definitions or definitions.names()
        self._write_manifest(names, finished=False)
        self._record_inputs()
        self.ledger.event("run_start", backend=self.config.backend, model=getattr(self.backend, "model", None),
                          seed=self.config.seed, gpu=self.gpu, skills_digest=sk.set_digest(self.skills),
                          parallel=self.config.parallel, devices=self.pool.devices)
        for definition in names:
            template = resolve_template(definition, self.config)
            spec = render.load_template(template, self.config.templates_root)
            state = DefinitionState(definition, template, spec,
                                    render.template_digest(template, self.config.templates_root),
                                    frontier=Frontier(self.config.frontier))
            self.states.append(state)
            try:
                state.workloads = self.hooks.workloads(definition, self.config.workloads or None,
                                                       self.config.workload_count)
                self.env = self._env(state)
                made = 0
                while made < self.config.max_iters:
                    made += self._round(state, made)
                state.stop_reason = f"iteration budget reached ({self.config.max_iters})"
            except StopRun as stop:
                state.stop_reason = str(stop)
            self._promote(state)
            self.ledger.event("definition_end", definition=definition, stop_reason=state.stop_reason,
                              candidates=len(state.records), best=state.best and state.best["id"],
                              promoted=state.promoted)
        summary = self._summary()
        self.ledger.event("run_end", **{"fib_sdk.totals": summary["ledger"]["total"]})
        self._write_manifest(names, finished=True, summary=summary)
        return summary

    def _round(self, state: DefinitionState, made: int) -> int:
        """Plan, write, evaluate and decide up to `parallel` candidates; returns how many were made."""
        first_iteration = made + 1
        self._read_redirect(state, first_iteration)
        ctx = self._common_context(state, first_iteration)
        events = self._events(state)
        self._maybe_research(state, ctx, events, first_iteration)
        slots = max(1, min(self.config.parallel, self.config.max_iters - made))
        parents = state.frontier.parents(slots)
        plans = []
        for slot in range(slots):
            iteration = first_iteration + slot
            base_record = parents[slot] if parents else None
            base, base_id = (base_record["params"], base_record["id"]) if base_record else self._fallback_base(state)
            try:
                plan_text, plan = self._plan(state, iteration, slot, base, base_id, plans, events)
            except StopRun:
                if plans:
                    break  # the round's earlier plans still run
                raise
            plans.append((iteration, plan_text, plan))
        jobs = []
        for iteration, plan_text, plan in plans:
            self.counter += 1
            cid = f"c{self.counter:04d}"
            folder = self.run_dir / "candidates" / cid
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "plan.md").write_text(plan_text)
            parent = self._record_of(state, plan.get("parent"))
            jobs.append((iteration, cid, folder, plan, parent))
        workers = max(1, min(len(jobs), self.config.parallel))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="candidate") as pool:
            written = list(pool.map(lambda job: self._write_candidate(state, *job, events), jobs))
        stop = None
        for (iteration, cid, folder, plan, parent), (box, outcome, final) in zip(jobs, written):
            record = self._decide(state, iteration, cid, folder, plan, parent, box, outcome, final)
            jsonl.append(self.lineage_path, record)
            state.records.append(record)
            stop = stop or outcome.stop_run
        if stop:
            raise StopRun(stop)
        return len(jobs)

    def _maybe_research(self, state: DefinitionState, ctx: dict, events: set, iteration: int) -> None:
        trigger = None
        if state.failures >= 2:
            trigger = f"{state.failures} failed candidates in a row"
        elif state.non_improving >= self.config.plateau:
            trigger = f"{state.non_improving} timed candidates without a win (plateau)"
        if not trigger:
            return
        events.add("plateau")
        _, payload = self._call("researcher", "research", state, iteration, None,
                                {**ctx, "trigger": trigger, "history": self._history(state)}, events)
        state.research_note = str(payload.get("note", ""))
        state.jump = bool(payload.get("jump", False))
        state.failures = state.non_improving = 0

    def _task(self, state: DefinitionState, budget: int, *, sources: dict, label: str, skills: list,
              first_files=()) -> str:
        best = state.best
        best_dir = self.run_dir / "candidates" / best["id"] if best else None
        return brief_mod.task_brief(
            state.definition, all_workloads=self.env.all_workloads, selected=state.workloads, skills=skills,
            sources=sources, sources_label=label, best=best,
            gate_rows=self._json(best_dir, "gate.json", {}).get("rows", []) if best else [],
            bench_rows=self._json(best_dir, "bench.json", []) if best else [], first_files=first_files,
            budget=budget, policy=self.policy.text)

    def _plan(self, state: DefinitionState, iteration: int, slot: int, base, base_id, plans: list,
              events: set) -> tuple[str, dict]:
        ctx = self._common_context(state, iteration)
        task = self._task(state, self.config.prompt_chars // 3, sources={}, label="candidate", skills=[])
        plan_text, plan = self._call("planner", "plan", state, iteration, None, {
            **ctx, "task": task, "history": self._history(state), "best": state.best, "slot": slot,
            "frontier": [{k: r.get(k) for k in self.HISTORY_KEYS} for r in state.frontier.members],
            "pending": [p for _, _, p in plans], "defaults": state.spec.get("defaults", {}),
            "visited": sorted(state.visited), "base": base, "base_id": base_id, "jump": state.jump,
            "focus": self.directives.get("focus"), "pin": self.directives.get("pin"),
            "redirect": self.redirect_text, "research_note": state.research_note,
            "profile": state.profile_summary}, events)
        state.jump = False
        if plan.get("stop"):
            raise StopRun(f"planner stopped: {plan['stop']}")
        if isinstance(plan.get("params"), dict):
            state.visited.add(json.dumps(plan["params"], sort_keys=True))  # planned = visited (no twin in flight)
        return plan_text, plan

    def _write_candidate(self, state: DefinitionState, iteration: int, cid: str, folder: Path, plan: dict,
                         parent: dict | None, events: set):
        """The coder's tool session for one candidate, then the pipeline on what it finished with."""
        parent_ws = state.workspaces.get(parent["id"]) if parent else None
        ws = Workspace(folder, candidate_id=cid, definition=state.definition, template=state.template,
                       templates_root=self.config.templates_root, parent=parent_ws,
                       parent_id=parent["id"] if parent else None)
        state.workspaces[cid] = ws
        box = ToolBox(ws, self.env, source=self.config.backend)
        parent_dir = self.run_dir / "candidates" / parent["id"] if parent else None
        box.parent_bench = self._json(parent_dir, "bench.json", []) if parent else []
        box.first_bench = list(state.first_bench)
        chosen = sk.select(self.skills, "coder", state.template, set(events), set(plan.get("skills", []) or []))
        task = self._task(state, self.config.prompt_chars, sources=ws.files(), label="candidate", skills=chosen,
                          first_files=[f for f in plan.get("files", []) or [] if isinstance(f, str)])
        ctx = {**self._common_context(state, iteration), "candidate_id": cid, "plan": plan, "parent": parent,
               "params": ws.params, "build_log": self._tail(parent_dir, "build.log") if parent else "",
               "gate_rows": self._json(parent_dir, "gate.json", {}).get("rows", []) if parent else [],
               "brief": task, "max_turns": self.config.max_turns, "profile": self.config.profile,
               "device_note": self._device_note()}
        system, _ = prompting.render("coder_system", ctx)
        user, template_ref = prompting.render("coder", ctx)
        session = ToolSession(self._session_caller(state, iteration, cid, ctx, chosen, template_ref), box, system,
                              user, SessionLimits(self.config.max_turns, self.config.candidate_tokens), self.budgets)
        outcome = session.run()
        (folder / "session.json").write_text(json.dumps({"reason": outcome.reason, "turns": outcome.turns,
                                                         "tool_calls": outcome.tool_calls,
                                                         "transcript": session.transcript}, indent=1) + "\n")
        final = finalize(box, self.policy, state.records) if outcome.finished else None
        return box, outcome, final

    def _device_note(self) -> str:
        if self.gpu:
            return f"Gate and bench run on {self.gpu}."
        if self.config.cpu_gate:
            return ("This machine has no GPU: gate runs the solution's torch fallback on the CPU (the CUDA kernels "
                    "do not run) and bench is refused; compile checks the CUDA.")
        return "This machine has no GPU: gate and bench are refused; compile checks the CUDA."

    # ----- one candidate ------------------------------------------------------------------------------------
    def _decide(self, state: DefinitionState, iteration: int, cid: str, folder: Path, plan: dict,
                parent: dict | None, box: ToolBox, outcome, final: dict | None) -> dict:
        ws = box.ws
        record = {"id": cid, "parent": parent and parent["id"], "definition": state.definition,
                  "iteration": iteration, "template": state.template, "template_sha": state.template_sha,
                  "direction": str(plan.get("direction", "")), "solution_name": ws.name,
                  "session": {"reason": outcome.reason, "turns": outcome.turns, "tool_calls": outcome.tool_calls},
                  "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if final is None:
            final = blank_record(box)
            final["statuses"]["coder"] = f"failed: {outcome.reason}"
        rows = final.pop("bench_rows", None)
        record.update(final)
        if rows:  # scored now that the first timed candidate of the run is known
            record.update(score(rows, box.parent_bench, state.first_bench or rows))
        timed = record["speedup"] is not None
        if timed:
            self._profile(state, iteration, record, folder)
        else:
            why = record["statuses"].get("bench") or record["statuses"]
            (folder / "profile.md").write_text(f"not profiled: nothing was timed ({why})\n" + self._ptxas_lines(record))
        decision = rule_decision(record, state.best, self.config.min_gain, parent=parent,
                                 frontier_floor=state.frontier.floor())
        if timed:
            ectx = {**self._common_context(state, iteration), "candidate_id": cid,
                    "candidate": {k: record.get(k) for k in ("id", "parent", "params", "overlay_files", "latency_ms",
                                                             "speedup", "speedup_vs_reference", "speedup_vs_parent")},
                    "gate_rows": self._json(folder, "gate.json", {}).get("rows", []),
                    "bench": self._json(folder, "bench.json", []), "best": state.best and {
                        k: state.best[k] for k in ("id", "latency_ms", "speedup")},
                    "min_gain": self.config.min_gain, "rule_decision": decision}
            _, verdict = self._call("evaluator", "evaluate", state, iteration, cid, ectx, {"timed"})
            said = verdict.get("decision")
            if decision["decision"] == "accept" and said in ("rework", "reject"):
                decision = {"decision": said, "reason": f"evaluator: {verdict.get('reason', '')}".strip()}
        record.update(decision)
        (folder / "decision.json").write_text(json.dumps(decision, indent=1) + "\n")
        if timed and not state.first_bench:
            state.first_bench = self._json(folder, "bench.json", [])
        if decision["decision"] == "accept":
            state.frontier.add(record)
            state.non_improving = state.failures = 0
        elif timed:
            state.non_improving += 1
        elif decision["decision"] == "reject":
            state.failures += 1
        return record

    def _profile(self, state: DefinitionState, iteration: int, record: dict, folder: Path) -> None:
        bench = self._json(folder, "bench.json", [])
        ncu = None
        if self.config.profile:
            slowest = max(bench, key=lambda r: r["latency_ms"])["workload"]
            workload = next((w for w in state.workloads if w.uuid == slowest), None)
            try:
                with self.pool.acquire() as device:
                    ncu = self.hooks.profile(folder / "package", state.definition, workload, folder,
                                             device=device) if workload else None
            except Exception as exc:  # ncu missing counters permission, timeouts: timing evidence only
                ncu = None
                (folder / "ncu.txt").write_text(f"ncu failed: {type(exc).__name__}: {exc}\n")
            record["statuses"]["profile"] = "ncu" if ncu else "ncu unavailable: timing evidence only"
        text, payload = self._call("profiler", "profile", state, iteration, record["id"], {
            **self._common_context(state, iteration), "candidate_id": record["id"],
            "gate_status": record["statuses"]["gate"], "bench": bench, "ptxas": record.get("ptxas", []),
            "ncu": ncu})
        (folder / "profile.md").write_text(text)
        state.profile_summary = str(payload.get("bottleneck", ""))

    # ----- promotion and reporting --------------------------------------------------------------------------
    def _promote(self, state: DefinitionState) -> None:
        if state.best is None:
            return
        best = state.best
        dest_root = Path(self.config.promote_to) if self.config.promote_to else self.run_dir / "promoted"
        name = self.config.promote_name or state.template
        if len(self.states) > 1 and self.config.promote_name:
            name = f"{self.config.promote_name}_{state.template}"
        chain, node = [], best
        while node is not None:
            chain.append({k: node.get(k) for k in ("id", "params", "overlay_files", "latency_ms", "speedup",
                                                   "speedup_vs_reference", "speedup_vs_parent", "decision",
                                                   "reason")})
            node = self._record_of(state, node["parent"])
        folder = self.run_dir / "candidates" / best["id"]
        evidence = {"run_id": self.run_id, "candidate": best, "lineage": chain, "gpu": self.gpu,
                    "workloads": [w.uuid for w in state.workloads], "trials": self.config.trials,
                    "seed": self.config.seed, "gate": self._json(folder, "gate.json", {}),
                    "bench": self._json(folder, "bench.json", []), "skills_digest": sk.set_digest(self.skills),
                    "policy_sha256": sha256(self.policy.raw or "builtin"), "backend": self.config.backend,
                    "patches": sorted(p.name for p in (folder / "patches").glob("*.diff")),
                    "ledger_totals": summarize(self.ledger.records)["by_definition"].get(state.definition)}
        dest = cand.promote(best, folder / "package", dest_root, name, evidence)
        state.promoted = str(dest)
        self.ledger.event("promoted", definition=state.definition, candidate_id=best["id"], path=str(dest),
                          latency_ms=best["latency_ms"], speedup=best["speedup"])

    def _summary(self) -> dict:
        ledger = summarize(self.ledger.records)
        calls = [r for r in self.ledger.records if r.get("kind") == "call"]
        return {"run_id": self.run_id, "run_dir": str(self.run_dir), "backend": self.config.backend,
                "gpu": self.gpu, "ledger": ledger,
                "model_calls": {"total": len(calls), "ok": sum(r.get("error.type") is None for r in calls)},
                "definitions": [{"definition": s.definition, "template": s.template, "candidates": len(s.records),
                                 "decisions": {d: sum(r["decision"] == d for r in s.records)
                                               for d in ("accept", "rework", "reject", "blocked")},
                                 "best": s.best and {k: s.best.get(k) for k in (
                                     "id", "params", "overlay_files", "latency_ms", "speedup", "speedup_basis",
                                     "speedup_vs_reference", "speedup_vs_parent")},
                                 "frontier": [r["id"] for r in s.frontier.members],
                                 "promoted": s.promoted, "stop_reason": s.stop_reason,
                                 "workloads": [w.uuid for w in s.workloads]} for s in self.states]}

    def _write_manifest(self, names: list[str], finished: bool, summary: dict | None = None) -> None:
        manifest = {"run_id": self.run_id, "config": self.config.manifest(), "definitions": names,
                    "backend": self.config.backend, "model": getattr(self.backend, "model", None), "gpu": self.gpu,
                    "devices": self.pool.devices, "skills": [s.ref() for s in self.skills],
                    "skills_digest": sk.set_digest(self.skills), "policy": self.policy.source,
                    "python": platform.python_version(), "finished": finished,
                    "summary": summary and {"definitions": summary["definitions"],
                                            "ledger_total": summary["ledger"]["total"],
                                            "model_calls": summary["model_calls"]}}
        (self.run_dir / "run.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")

    # ----- small file helpers -------------------------------------------------------------------------------
    @staticmethod
    def _tail(folder: Path | None, name: str, chars: int = 4000) -> str:
        path = folder / name if folder else None
        return path.read_text()[-chars:] if path and path.exists() else ""

    @staticmethod
    def _json(folder: Path | None, name: str, default):
        path = folder / name if folder else None
        return json.loads(path.read_text()) if path and path.exists() else default

    @staticmethod
    def _ptxas_lines(record: dict) -> str:
        return "".join(f"- {k['kernel']}: {k['registers']} registers, {k['spill_bytes']} B spills, "
                       f"{k['smem_bytes']} B static smem\n" for k in record.get("ptxas", []))


def run(config: RunConfig, hooks: Hooks | None = None, backend=None) -> dict:
    return Loop(config, hooks, backend).run()
