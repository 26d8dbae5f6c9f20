"""Skills parse and govern the kernel templates; prompts render strictly; the static scan; the seeded search."""
import random
from pathlib import Path

import jinja2
import pytest

from sdk.agent import policy, prompting, search, skills

KERNEL_TEMPLATES = {"templates/dsa_topk_indexer", "templates/dsa_sparse_attention", "templates/fused_moe",
                    "templates/common"}
JIT_BUILD = Path(__file__).resolve().parents[1] / "templates" / "common" / "jit_build.py"


def test_skill_set_is_complete_and_well_formed():
    loaded = skills.load()
    names = {s.name for s in loaded}
    assert {"cuda-coding", "profiling", "next-experiment", "structural-redesign", "moe-domain", "dsa-domain",
            "hopper-sm90", "fp8-block-scale", "anti-hacking", "debugging"} <= names
    governed = set()
    for skill in loaded:
        assert 20 < len(skill.description) < 200 and skill.version >= 1
        assert set(skill.governs) <= KERNEL_TEMPLATES, skill.name
        governed |= set(skill.governs)
        longest = max((len(block.splitlines()) for block in skill.body.split("```")[1::2]), default=0)
        assert longest <= 12, f"{skill.name}: skills carry guidance, not kernels"
    assert governed == KERNEL_TEMPLATES
    assert len(skills.set_digest(loaded)) == 64


def test_skills_are_selected_by_role_template_and_event():
    loaded = skills.load()
    coder = {s.name for s in skills.select(loaded, "coder", "dsa_topk_indexer")}
    assert {"cuda-coding", "dsa-domain", "hopper-sm90", "fp8-block-scale", "anti-hacking"} <= coder
    assert "moe-domain" not in coder and "debugging" not in coder
    assert "debugging" in {s.name for s in skills.select(loaded, "coder", "fused_moe", {"build_error"})}
    assert "structural-redesign" in {s.name for s in skills.select(loaded, "researcher", "fused_moe", {"plateau"})}
    assert "moe-domain" in {s.name for s in skills.select(loaded, "profiler", "x", requested={"moe-domain"})}


def test_bad_skill_file_is_reported(tmp_path):
    (tmp_path / "x.md").write_text("# Title first\n")
    with pytest.raises(ValueError, match="one-line description"):
        skills.load(tmp_path)


def test_every_prompt_renders_and_missing_variables_fail():
    common = {"definition": "d", "template": "t", "template_sha": "0" * 64, "space": {"A": [1, 2]},
              "template_toml": "[space]\nA = [1, 2]\n",
              "iteration": 1, "max_iters": 2, "policy_text": ["rule"], "references": [], "gpu": None,
              "skills": skills.load()[:1]}
    contexts = {
        "planner": {"history": [], "best": None, "defaults": {}, "profile": "", "research_note": "",
                    "redirect": "turn left", "task": "## Definition d", "frontier": [], "pending": []},
        "coder": {"candidate_id": "c1", "plan": {"params": {"A": 1}}, "parent": None, "params": {"A": 1},
                  "build_log": "", "gate_rows": [], "brief": "## Definition d"},
        "coder_system": {"candidate_id": "c1", "max_turns": 3, "profile": False, "device_note": "no GPU"},
        "profiler": {"candidate_id": "c1", "gate_status": "PASSED", "bench": [{"workload": "w", "latency_ms": 1}],
                     "ptxas": [], "ncu": None},
        "evaluator": {"candidate_id": "c1", "candidate": {}, "gate_rows": [], "bench": [], "best": None,
                      "min_gain": 0.02, "rule_decision": {"decision": "accept", "reason": "r"}},
        "researcher": {"trigger": "plateau", "history": []},
    }
    for role, extra in contexts.items():
        text, ref = prompting.render(role, {**common, **extra})
        assert f"Role: {role.split('_')[0]}" in text or role == "coder"
        assert ("Output contract" in text) == (role not in ("coder", "coder_system")) and len(ref["sha256"]) == 16
    assert "turn left" in prompting.render("planner", {**common, **contexts["planner"]})[0]
    with pytest.raises(jinja2.UndefinedError):
        prompting.render("coder", common)


def test_static_scan_applies_the_gate_rules_and_spares_the_jit_loader():
    scan = policy.Policy().scan
    assert scan({"jit_build.py": JIT_BUILD.read_text()}) == []
    hacks = {
        "a.py": "from sdk.gate import x\n",
        "b.py": "_CACHE = {}\ndef run(x, y):\n    k = x.data_ptr()\n    _CACHE[k] = y\n",
        "c.py": "import threading\n",
        "d.cu": "static std::unordered_map<int, int> seen;\n",
        "f.py": "import inspect\n",
    }
    rules = {(f.file, f.rule) for f in policy.blocking(scan(hacks))}
    assert rules == {("a.py", "forbidden-import"), ("b.py", "pointer-key"), ("b.py", "global-state"),
                     ("c.py", "forbidden-import"), ("d.cu", "global-state"), ("f.py", "forbidden-import")}
    assert [(f.rule, f.severity) for f in scan({"h.py": "def run(t):\n    return t.item()\n"})] == [
        ("host_sync", "warn")]
    assert policy.declares_cache({"m.py": 'FIB_DECLARED_CACHE = "compiled plan per shape"\n'})


def test_policy_file_adds_rules(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text('rules = ["no cub"]\n[[forbidden]]\nid = "no_cub"\npattern = "cub::"\nfiles = ["*.cu"]\n')
    loaded = policy.load(path)
    assert "no cub" in loaded.text and [f.rule for f in loaded.scan({"k.cu": "cub::DeviceScan x;"})] == ["no_cub"]
    assert policy.blocking(loaded.scan({"k.cu": "cub::DeviceScan x;"}))
    path.write_text('[[forbidden]]\nid = "x"\npattern = "("\n')
    with pytest.raises(ValueError, match="bad \\[\\[forbidden\\]\\] entry"):
        policy.load(path)


def test_search_is_seeded_and_local():
    space = {"A": [1, 2, 3], "B": ["x", "y"]}
    first, why = search.propose(space, set(), None, random.Random(0), defaults={"A": 2})
    assert first == {"A": 2, "B": "x"} and "seed point" in why
    visited = {search.key(first)}
    runs = [search.propose(space, visited, first, search.rng_for(5, "d", 2)) for _ in range(2)]
    assert runs[0] == runs[1]
    moved, _ = runs[0]
    assert sum(moved[k] != first[k] for k in space) == 1  # one parameter moved one step
    everything = {search.key({"A": a, "B": b}) for a in space["A"] for b in space["B"]}
    assert search.propose(space, everything, first, random.Random(1)) is None
    pinned, _ = search.propose(space, visited, first, random.Random(1), pin={"B": "x"})
    assert pinned["B"] == "x"
