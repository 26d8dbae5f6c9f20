"""The agent loop: per definition, iterate planner -> coder -> candidate pipeline -> profiler -> evaluator, record
every model call in the ledger and every candidate in the lineage, and promote the best gated candidate.

Candidate pipeline: static anti-hacking scan -> render -> nvcc compile check (sm_90a) -> gate -> bench ->
optional profile -> decision. The decision rules are hard: only a candidate that passed the gate on every selected
workload and was timed can be accepted; a model evaluator may downgrade an accept, never upgrade anything else.
Budgets (tokens, iterations, wall time) are checked before every model call.

Run folder:
  run.json             manifest (config, backend, skills digest, policy, templates, workloads, stop reasons)
  ledger.jsonl         one line per model call / human input / event (sdk.agent.ledger)
  calls/<seq>.json     full prompt and response of each call (what replay reads)
  candidates.jsonl     lineage, one line per candidate
  candidates/<id>/     plan.md, coder.md, params.json, package/, scan.json, build.log, gate.json, bench.json,
                       profile.md, decision.json
  redirect.md          (optional, written by a human while the run goes) read at the start of every iteration
  promoted/<name>/     the promoted solution with render.toml and evidence.json (unless --promote-to elsewhere)
"""
from __future__ import annotations

import json
import platform
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import definitions, render
from ..errors import BadInputError
from . import backends as B
from . import candidate as cand
from . import jsonl, parse, prompting
from . import policy as pol
from . import skills as sk
from .build import compile_check
from .hooks import GateOutcome, Hooks
from .ledger import Ledger, Usage, sha256, summarize

DEFAULT_TEMPLATES = {
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": "fused_moe",
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": "dsa_topk_indexer",
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": "dsa_sparse_attention",
}
SOURCE_CHARS = 24_000      # per parent file shown to a model coder
REFERENCE_CHARS = 8_000    # per human reference file injected into prompts
SUSPICIOUS_GAIN = 10.0     # speedup over the best so far that is held for review


@dataclass
class RunConfig:
    run_dir: Path
    definitions: list[str] = field(default_factory=list)
    backend: str = "offline"
    model: str | None = None
    seed: int = 0
    max_iters: int = 6
    budget_tokens: int | None = None
    budget_wall_s: float | None = None
    template: str | None = None
    templates_root: Path = render.TEMPLATES
    workloads: list[str] = field(default_factory=list)
    workload_count: int = 4
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
    mock_responses: list | None = None
    timeout_s: float = 180.0
    max_retries: int = 3
    skills_root: Path = sk.SKILLS

    def manifest(self) -> dict:
        out = asdict(self)
        out.pop("mock_responses")
        out["scripted_mock_responses"] = None if self.mock_responses is None else len(self.mock_responses)
        return json.loads(json.dumps(out, default=str))


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
    best: dict | None = None
    root_bench: dict | None = None
    non_improving: int = 0
    failures: int = 0
    research_note: str = ""
    jump: bool = False
    profile_summary: str = ""
    stop_reason: str = ""
    promoted: str | None = None


def make_backend(config: RunConfig) -> object:
    if config.backend == "offline":
        return B.OfflineBackend(config.seed)
    if config.backend == "litellm":
        return B.LiteLLMBackend(config.model or "", timeout_s=config.timeout_s, max_retries=config.max_retries,
                                seed=config.seed, mock_responses=config.mock_responses)
    if config.backend == "replay":
        if config.replay_from is None:
            raise BadInputError("the replay backend needs the recorded run folder (--replay-from RUN_DIR)")
        return B.ReplayBackend(config.replay_from)
    raise BadInputError(f"unknown backend {config.backend!r}; use offline, litellm or replay")


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


def rule_decision(record: dict, best: dict | None, min_gain: float) -> dict:
    """accept / rework / reject / blocked from the recorded statuses alone."""
    s = record["statuses"]
    for step in ("coder", "render", "scan", "duplicate", "compile"):
        if str(s.get(step, "ok")).startswith(("error", "blocked", "failed", "unparsable", "duplicate")):
            return {"decision": "reject", "reason": f"{step}: {s[step]}"}
    gate = s.get("gate", "")
    if gate.startswith("not gated"):
        compiled = s.get("compile", "")
        done = "compiled for sm_90a" if compiled == "ok" else f"compile {compiled}"
        return {"decision": "blocked", "reason": f"{done}; {gate}; {s.get('bench', 'not timed')}"}
    if gate != "PASSED":
        return {"decision": "reject", "reason": f"gate: {gate}"}
    if record.get("speedup") is None:
        return {"decision": "blocked", "reason": f"gate PASSED; {s.get('bench', 'not timed')}"}
    if record.get("declared_cache") and not record.get("cold_warm_reported"):
        return {"decision": "rework", "reason": "declares a cache: cold and warm latency must both be reported"}
    if best is None:
        return {"decision": "accept", "reason": "first gated and timed candidate (baseline for speedups)"}
    ratio = record["speedup"] / best["speedup"]
    if ratio > SUSPICIOUS_GAIN:
        return {"decision": "rework", "reason": f"{ratio:.1f}x over the best in one step: held for review"}
    if ratio >= 1 + min_gain:
        return {"decision": "accept", "reason": f"{(ratio - 1) * 100:.1f}% faster than {best['id']}"}
    if ratio >= 1 - min_gain:
        return {"decision": "rework", "reason": f"within the {min_gain:.0%} noise margin of {best['id']}"}
    return {"decision": "reject", "reason": f"{(1 - ratio) * 100:.1f}% slower than {best['id']}"}


class Loop:
    def __init__(self, config: RunConfig, hooks: Hooks | None = None, backend=None):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.hooks = hooks or Hooks()
        self.backend = backend or make_backend(config)
        self.run_id = uuid.uuid4().hex
        self.ledger = Ledger(self.run_dir, self.run_id)
        self.lineage_path = self.run_dir / "candidates.jsonl"
        self.counter = len(jsonl.read(self.lineage_path))
        self.policy = pol.load(config.policy)
        self.skills = sk.load(config.skills_root)
        self.references = []
        self.redirect_path = Path(config.redirect) if config.redirect else self.run_dir / "redirect.md"
        self.redirect_sha, self.redirect_text, self.directives = None, "", {}
        self.started = time.monotonic()
        self.gpu = self.hooks.gpu()
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
            clipped = body[:REFERENCE_CHARS] + ("\n[... truncated]" if len(body) > REFERENCE_CHARS else "")
            self.references.append({"name": Path(path).name, "text": clipped})

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
    def _check_budgets(self) -> None:
        used = self.ledger.tokens_used()
        if self.config.budget_tokens is not None and used >= self.config.budget_tokens:
            raise StopRun(f"token budget exhausted ({used} of {self.config.budget_tokens} tokens used)")
        elapsed = time.monotonic() - self.started
        if self.config.budget_wall_s is not None and elapsed >= self.config.budget_wall_s:
            raise StopRun(f"wall-time budget exhausted ({elapsed:.0f} s of {self.config.budget_wall_s:.0f} s)")

    def _call(self, role: str, phase: str, state: DefinitionState, iteration: int, candidate_id: str | None,
              context: dict, events: set = frozenset(), requested: set = frozenset()) -> tuple[str, dict]:
        self._check_budgets()
        chosen = sk.select(self.skills, role, state.template, set(events), set(requested))
        prompt, template_ref = prompting.render(role, {**context, "skills": chosen})
        t_start = time.time()
        common = dict(role=role, phase=phase, definition=state.definition, candidate_id=candidate_id,
                      iteration=iteration, backend=self.config.backend, prompt=prompt, prompt_template=template_ref,
                      skills=[s.ref() for s in chosen], temperature=getattr(self.backend, "temperature", None),
                      seed=self.config.seed)
        try:
            reply = self.backend.complete(B.Request(role, phase, prompt, context))
        except B.ModelCallError as exc:
            self.ledger.call(**common, provider=getattr(self.backend, "provider", self.config.backend),
                             model=getattr(self.backend, "model", "?"), response="", usage=Usage(), cost_usd=None,
                             cost_source="none: call failed", t_start=t_start, t_end=time.time(),
                             retries=exc.retries, error_type=exc.error_type)
            raise StopRun(f"{role} call failed: {exc}") from None
        self.ledger.call(**common, provider=reply.provider, model=reply.model, response=reply.text, usage=reply.usage,
                         cost_usd=reply.cost_usd, cost_source=reply.cost_source, t_start=t_start, t_end=time.time(),
                         response_model=reply.response_model, response_id=reply.response_id,
                         finish_reasons=reply.finish_reasons, retries=reply.retries, extra=reply.extra)
        try:
            payload = parse.json_payload(reply.text)
        except BadInputError:
            payload = {}
        return reply.text, payload

    # ----- state helpers ------------------------------------------------------------------------------------
    def _base(self, state: DefinitionState) -> tuple[dict | None, str | None]:
        if state.best is not None:
            return state.best["params"], state.best["id"]
        for record in reversed(state.records):
            if not record["overlay_files"] and record["statuses"].get("compile", "").startswith(("ok", "skipped")) \
                    and record["params"]:
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

    def _history(self, state: DefinitionState) -> list[dict]:
        return [{k: r[k] for k in ("id", "parent", "params", "overlay_files", "statuses", "latency_ms", "speedup",
                                   "decision", "reason")} for r in state.records]

    def _common_context(self, state: DefinitionState, iteration: int) -> dict:
        return {"definition": state.definition, "template": state.template, "template_sha": state.template_sha,
                "space": state.spec["space"], "template_toml": (state.spec["folder"] / "template.toml").read_text(),
                "iteration": iteration, "max_iters": self.config.max_iters,
                "policy_text": self.policy.text, "references": self.references, "gpu": self.gpu}

    # ----- the loop -----------------------------------------------------------------------------------------
    def run(self) -> dict:
        names = self.config.definitions or definitions.names()
        self._write_manifest(names, finished=False)
        self._record_inputs()
        self.ledger.event("run_start", backend=self.config.backend, model=getattr(self.backend, "model", None),
                          seed=self.config.seed, gpu=self.gpu, skills_digest=sk.set_digest(self.skills))
        for definition in names:
            template = resolve_template(definition, self.config)
            spec = render.load_template(template, self.config.templates_root)
            state = DefinitionState(definition, template, spec,
                                    render.template_digest(template, self.config.templates_root))
            self.states.append(state)
            try:
                if self.gpu:
                    state.workloads = self.hooks.workloads(definition, self.config.workloads or None,
                                                           self.config.workload_count)
                for iteration in range(1, self.config.max_iters + 1):
                    self._iteration(state, iteration)
                else:
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

    def _iteration(self, state: DefinitionState, iteration: int) -> None:
        self._read_redirect(state, iteration)
        ctx = self._common_context(state, iteration)
        events = self._events(state)
        trigger = None
        if state.failures >= 2:
            trigger = f"{state.failures} failed candidates in a row"
        elif state.non_improving >= self.config.plateau:
            trigger = f"{state.non_improving} timed candidates without a win (plateau)"
        if trigger:
            events.add("plateau")
            _, payload = self._call("researcher", "research", state, iteration, None,
                                    {**ctx, "trigger": trigger, "history": self._history(state)}, events)
            state.research_note = str(payload.get("note", ""))
            state.jump = bool(payload.get("jump", False))
            state.failures = state.non_improving = 0
        base, base_id = self._base(state)
        plan_text, plan = self._call("planner", "plan", state, iteration, None, {
            **ctx, "history": self._history(state), "best": state.best, "defaults": state.spec.get("defaults", {}),
            "visited": sorted(state.visited), "base": base, "base_id": base_id, "jump": state.jump,
            "focus": self.directives.get("focus"), "pin": self.directives.get("pin"),
            "redirect": self.redirect_text, "research_note": state.research_note,
            "profile": state.profile_summary}, events)
        state.jump = False
        if plan.get("stop"):
            raise StopRun(f"planner stopped: {plan['stop']}")
        self.counter += 1
        cid = f"c{self.counter:04d}"
        folder = self.run_dir / "candidates" / cid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "plan.md").write_text(plan_text)
        parent_id = plan.get("parent") if any(r["id"] == plan.get("parent") for r in state.records) else None
        parent = next((r for r in state.records if r["id"] == parent_id), None)
        parent_dir = self.run_dir / "candidates" / parent_id if parent_id else None
        coder_text, code = self._call("coder", "generate", state, iteration, cid, {
            **ctx, "candidate_id": cid, "plan": plan, "parent_id": parent_id,
            "parent_sources": self._sources(parent_dir), "build_log": self._tail(parent_dir, "build.log"),
            "gate_rows": self._json(parent_dir, "gate.json", {}).get("rows", [])}, events,
            requested=set(plan.get("skills", []) or []))
        (folder / "coder.md").write_text(coder_text)
        record = self._evaluate(state, iteration, cid, folder, plan, code, coder_text, parent)
        jsonl.append(self.lineage_path, record)
        state.records.append(record)

    # ----- one candidate ------------------------------------------------------------------------------------
    def _evaluate(self, state: DefinitionState, iteration: int, cid: str, folder: Path, plan: dict, code: dict,
                  coder_text: str, parent: dict | None) -> dict:
        template = code.get("template") or plan.get("template") or state.template
        params = code.get("params") or plan.get("params") or (parent or {}).get("params") or {}
        overlay = {}
        statuses: dict[str, str] = {}
        record = {"id": cid, "parent": parent and parent["id"], "definition": state.definition,
                  "iteration": iteration, "template": template, "template_sha": state.template_sha,
                  "params": params, "overlay_files": [], "direction": str(plan.get("direction", "")),
                  "statuses": statuses, "latency_ms": None, "speedup": None, "sources_sha256": None,
                  "solution_name": f"agent-{template}-{cid}", "declared_cache": False, "cold_warm_reported": False,
                  "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (folder / "params.json").write_text(json.dumps({"template": template, "params": params}, indent=1,
                                                       sort_keys=True) + "\n")
        try:
            overlay = parse.file_blocks(coder_text)
        except BadInputError as exc:
            statuses["coder"] = f"unparsable: {exc}"
        if not code and "coder" not in statuses:
            statuses["coder"] = "unparsable: no JSON block in the coder's reply"
        record["overlay_files"] = sorted(overlay)
        if template != state.template:
            statuses["render"] = f"error: template {template!r} is not this definition's ({state.template})"
        if "coder" not in statuses and "render" not in statuses:
            try:
                files = cand.materialize(folder / "package", name=record["solution_name"],
                                         definition=state.definition, template=template, params=params,
                                         overlay=overlay, templates_root=self.config.templates_root)
                statuses["render"] = "ok"
                record["sources_sha256"] = cand.sources_digest(files)
                if not overlay:
                    state.visited.add(json.dumps(params, sort_keys=True))
            except Exception as exc:  # BadInputError for params outside the space, Jinja errors
                statuses["render"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if statuses.get("render") == "ok":
            self._pipeline(state, record, folder, files)
        return self._decide(state, iteration, record, folder)

    def _pipeline(self, state: DefinitionState, record: dict, folder: Path, files: dict) -> None:
        statuses = record["statuses"]
        twin = next((r for r in state.records if r["sources_sha256"] == record["sources_sha256"]), None)
        if twin is not None:
            statuses["duplicate"] = f"duplicate of {twin['id']} (identical sources)"
            return
        findings = self.policy.scan(files)
        (folder / "scan.json").write_text(json.dumps([f.as_dict() for f in findings], indent=1) + "\n")
        blocked = pol.blocking(findings)
        record["declared_cache"] = pol.declares_cache(files)
        warns = [f for f in findings if f.severity == "warn"]
        if blocked:
            first = blocked[0]
            statuses["scan"] = f"blocked: {first.rule} at {first.file}:{first.line} ({len(blocked)} finding(s))"
            return
        statuses["scan"] = "passed" + (f" with {len(warns)} warning(s)" if warns else "")
        mode = self.config.compile_check
        build = None
        if mode == "always" or (mode == "auto" and not self.gpu):
            build = compile_check(folder / "package" / "solution" / "python", folder / "build")
            (folder / "build.log").write_text(build.log or (build.skipped or "") + "\n")
            statuses["compile"] = ("skipped: " + build.skipped) if build.skipped else (
                "ok" if build.ok else f"failed: {build.first_error()}")
            if not build.ok:
                return
        else:
            statuses["compile"] = "ok (by the gate's JIT build)" if self.gpu else "skipped: --compile-check never"
        record["ptxas"] = build.kernels if build else []
        if not self.gpu:
            statuses["gate"] = "not gated: no GPU"
            statuses["bench"] = "not timed: no GPU"
            return
        try:
            solution = cand.load_solution(folder / "package")
            outcome: GateOutcome = self.hooks.gate(solution, state.definition, state.workloads,
                                                   trials=self.config.trials, seed=self.config.seed)
        except Exception as exc:  # the gate reports failures as statuses; an exception is a failure too
            outcome = GateOutcome("FAILED", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                                  if str(exc) else type(exc).__name__)
        (folder / "gate.json").write_text(json.dumps(asdict(outcome), indent=1) + "\n")
        if outcome.status == "NOT_GATED":
            statuses["gate"] = f"not gated: {outcome.reason}"
            statuses["bench"] = "not timed: not gated"
            return
        statuses["gate"] = "PASSED" if outcome.status == "PASSED" else f"FAILED ({outcome.reason})"
        if outcome.status != "PASSED":
            statuses["bench"] = "not timed: gate did not pass"
            return
        try:  # the gate may have timed the candidate in the same worker; otherwise time it now
            rows = outcome.timings if outcome.timings is not None else self.hooks.time(
                solution, state.definition, state.workloads, seed=self.config.seed)
        except Exception as exc:  # a missing sdk.bench or a crash while timing: say so, time nothing
            statuses["bench"] = f"not timed: {type(exc).__name__}: {str(exc)[:160]}"
            return
        (folder / "bench.json").write_text(json.dumps(rows, indent=1) + "\n")
        statuses["bench"] = f"timed {len(rows)} workload(s)"
        record["cold_warm_reported"] = bool(rows) and all(r.get("cold_ms") is not None and r.get("warm_ms")
                                                          is not None for r in rows)
        record["latency_ms"] = round(statistics.fmean(r["latency_ms"] for r in rows), 6)
        latencies = {r["workload"]: r["latency_ms"] for r in rows}
        if state.root_bench is None:
            state.root_bench = latencies
        ratios = [state.root_bench[w] / t for w, t in latencies.items() if w in state.root_bench and t > 0]
        record["speedup"] = round(statistics.fmean(ratios), 6) if ratios else None

    def _decide(self, state: DefinitionState, iteration: int, record: dict, folder: Path) -> dict:
        statuses = record["statuses"]
        timed = record["speedup"] is not None
        if timed:
            self._profile(state, iteration, record, folder)
        else:
            why = statuses.get("bench", statuses)
            text = f"not profiled: nothing was timed ({why})\n" + self._ptxas_lines(record)
            (folder / "profile.md").write_text(text)
        decision = rule_decision(record, state.best, self.config.min_gain)
        if timed:
            ctx = {**self._common_context(state, iteration), "candidate_id": record["id"],
                   "candidate": {k: record[k] for k in ("id", "parent", "params", "latency_ms", "speedup")},
                   "gate_rows": self._json(folder, "gate.json", {}).get("rows", []),
                   "bench": self._json(folder, "bench.json", []), "best": state.best and {
                       k: state.best[k] for k in ("id", "latency_ms", "speedup")},
                   "min_gain": self.config.min_gain, "rule_decision": decision}
            _, verdict = self._call("evaluator", "evaluate", state, iteration, record["id"], ctx, {"timed"})
            said = verdict.get("decision")
            if decision["decision"] == "accept" and said in ("rework", "reject"):
                decision = {"decision": said, "reason": f"evaluator: {verdict.get('reason', '')}".strip()}
        record.update(decision)
        (folder / "decision.json").write_text(json.dumps(decision, indent=1) + "\n")
        if decision["decision"] == "accept":
            state.best, state.non_improving, state.failures = record, 0, 0
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
                ncu = self.hooks.profile(folder / "package", state.definition, workload, folder) if workload else None
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
            chain.append({k: node[k] for k in ("id", "params", "latency_ms", "speedup", "decision", "reason")})
            node = next((r for r in state.records if r["id"] == node["parent"]), None)
        folder = self.run_dir / "candidates" / best["id"]
        evidence = {"run_id": self.run_id, "candidate": best, "lineage": chain, "gpu": self.gpu,
                    "workloads": [w.uuid for w in state.workloads], "trials": self.config.trials,
                    "seed": self.config.seed, "gate": self._json(folder, "gate.json", {}),
                    "bench": self._json(folder, "bench.json", []), "skills_digest": sk.set_digest(self.skills),
                    "policy_sha256": sha256(self.policy.raw or "builtin"), "backend": self.config.backend,
                    "ledger_totals": summarize(self.ledger.records)["by_definition"].get(state.definition)}
        dest = cand.promote(best, folder / "package", dest_root, name, evidence)
        state.promoted = str(dest)
        self.ledger.event("promoted", definition=state.definition, candidate_id=best["id"], path=str(dest),
                          latency_ms=best["latency_ms"], speedup=best["speedup"])

    def _summary(self) -> dict:
        return {"run_id": self.run_id, "run_dir": str(self.run_dir), "backend": self.config.backend,
                "gpu": self.gpu, "ledger": summarize(self.ledger.records),
                "definitions": [{"definition": s.definition, "template": s.template, "candidates": len(s.records),
                                 "decisions": {d: sum(r["decision"] == d for r in s.records)
                                               for d in ("accept", "rework", "reject", "blocked")},
                                 "best": s.best and {k: s.best[k] for k in ("id", "params", "latency_ms", "speedup")},
                                 "promoted": s.promoted, "stop_reason": s.stop_reason,
                                 "workloads": [w.uuid for w in s.workloads]} for s in self.states]}

    def _write_manifest(self, names: list[str], finished: bool, summary: dict | None = None) -> None:
        manifest = {"run_id": self.run_id, "config": self.config.manifest(), "definitions": names,
                    "backend": self.config.backend, "model": getattr(self.backend, "model", None), "gpu": self.gpu,
                    "skills": [s.ref() for s in self.skills], "skills_digest": sk.set_digest(self.skills),
                    "policy": self.policy.source, "python": platform.python_version(), "finished": finished,
                    "summary": summary and {"definitions": summary["definitions"],
                                            "ledger_total": summary["ledger"]["total"]}}
        (self.run_dir / "run.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")

    # ----- small file helpers -------------------------------------------------------------------------------
    @staticmethod
    def _sources(folder: Path | None) -> dict[str, str]:
        source = folder / "package" / "solution" / "python" if folder else None
        if source is None or not source.is_dir():
            return {}
        out = {}
        for path in sorted(source.iterdir()):
            text = path.read_text()
            out[path.name] = text[:SOURCE_CHARS] + ("\n[... truncated]" if len(text) > SOURCE_CHARS else "")
        return out

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
