"""The agent's tools without a model: unified-diff patches (all or nothing), the task brief's budget (whole files
or a read_file pointer, never a cut), read_file in pieces, argument validation, the device pool, and the
scripted in-process backend replayed byte for byte."""
import json
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import DEF, TOY_ROOT, CpuHooks, fenced  # noqa: E402

from sdk import render  # noqa: E402
from sdk.agent import brief, jsonl, patching, skills  # noqa: E402
from sdk.agent.devices import CompileSlots, DevicePool  # noqa: E402
from sdk.agent.loop import RunConfig, run  # noqa: E402
from sdk.agent.tools import MAX_READ_CHARS, ToolArgumentError, ToolBox, ToolEnv, validate  # noqa: E402
from sdk.agent.workspace import Workspace  # noqa: E402

KERNEL = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n"


def test_unified_diff_applies_with_offsets_and_creates_files():
    diff = ("Some prose the model wrote first.\n--- a/k.cu\n+++ b/k.cu\n@@ -40,3 +40,3 @@\n line 2\n-line 3\n"
            "+line three\n line 4\n--- /dev/null\n+++ b/new.cuh\n@@ -0,0 +1,2 @@\n+#pragma once\n+int x;\n")
    files, report = patching.apply({"k.cu": KERNEL}, diff)  # the hint says line 40: found at line 2 anyway
    assert files["k.cu"] == KERNEL.replace("line 3", "line three") and files["new.cuh"] == "#pragma once\nint x;\n"
    assert report == ["k.cu: patched, 1 hunk(s), +1 -1 lines", "new.cuh: created, 1 hunk(s), +2 -0 lines"]
    # trailing whitespace in the model's context still matches; a deletion removes the file
    loose = "--- a/k.cu\n+++ b/k.cu\n@@ -1,2 +1,2 @@\n line 1  \n-line 2\n+line two\n"
    assert patching.apply({"k.cu": KERNEL}, loose)[0]["k.cu"] == KERNEL.replace("line 2", "line two")
    gone = patching.apply({"k.cu": KERNEL, "x.h": "a\n"}, "--- a/x.h\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n")[0]
    assert set(gone) == {"k.cu"}


@pytest.mark.parametrize("diff, message", [
    ("--- a/k.cu\n+++ b/k.cu\n@@ -1 +1 @@\n-line 9\n+x\n", "hunk 1 of 1 (@@ -1 @@) does not apply"),
    ("--- a/other.cu\n+++ b/other.cu\n@@ -1 +1 @@\n-a\n+b\n", "other.cu: no such file"),
    ("--- a/../k.cu\n+++ b/../k.cu\n@@ -1 +1 @@\n-a\n+b\n", "flat files"),
    ("--- a/k.txt\n+++ b/k.txt\n@@ -1 +1 @@\n-a\n+b\n", "not a source file"),
    ("just prose, no diff", "no file header found"),
    ("--- a/k.cu\n+++ b/k.cu\n@@ -1 +1 @@\n line 1\n", "changes nothing"),
])
def test_a_bad_patch_changes_nothing_and_says_why(diff, message):
    files = {"k.cu": KERNEL}
    good = "--- a/k.cu\n+++ b/k.cu\n@@ -1 +1 @@\n-line 1\n+first\n"
    for text in (diff, good + diff if "---" in diff else diff):  # a good file before a bad one: still nothing
        with pytest.raises(patching.PatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
            patching.apply(files, text)
    assert files == {"k.cu": KERNEL}


def test_the_brief_shows_whole_files_or_lists_them_never_a_cut():
    files = {"big.cuh": "// kernel\n" + "__global__ void k() {}\n" * 2000, "main.py": "def run():\n    pass\n",
             "launch.cu": "void launch() {}\n"}
    text = brief.task_brief(DEF, all_workloads=[], selected=[], skills=skills.load()[:2], sources=files,
                            sources_label="candidate", budget=20_000)
    assert len(text) <= 20_000 + 4_000  # the "not shown" list itself may go past the budget
    assert "## PyTorch reference" in text and "def run(" in text
    assert "candidate: `launch.cu`" in text and "candidate: `main.py`" in text
    assert "candidate: `big.cuh`" not in text and "- `candidate/big.cuh`: " in text  # listed with its outline
    assert "1: // kernel" not in text and "2: __global__ void k() {}" in text
    for name, body in files.items():  # a file is in the brief whole, or not at all
        shown = f"candidate: `{name}`" in text
        assert (body.rstrip() in text) == shown
    small = brief.task_brief(DEF, all_workloads=[], selected=[], skills=[], sources=files, sources_label="c",
                             budget=100)
    assert "## Not shown here" in small and "- `definition/reference.py`" in small
    assert "## PyTorch reference" not in small and "```python\n" not in small


def toolbox(tmp_path, **env) -> ToolBox:
    ws = Workspace(tmp_path / "c0001", candidate_id="c0001", definition=DEF, template="toy_scale",
                   templates_root=TOY_ROOT)
    hooks = CpuHooks()
    return ToolBox(ws, ToolEnv(definition=DEF, template="toy_scale", templates_root=TOY_ROOT, selected=[],
                               hooks=hooks, pool=DevicePool([]), compile_slots=CompileSlots(1), **env))


def test_read_file_sends_long_files_in_labelled_pieces(tmp_path):
    box = toolbox(tmp_path)
    long = "".join(f"// {i:05d} " + "x" * 90 + "\n" for i in range(1500))  # ~150 kB
    box.ws._write({**box.ws.files(), "long.cuh": long})
    first = box.call("read_file", {"path": "long.cuh"}).text
    head, body = first.split("\n", 1)
    last = int(head.split("lines 1-")[1].split(" ")[0])
    assert head.endswith(f"call again with start_line={last + 1}") and len(body) <= MAX_READ_CHARS
    assert body == "".join(long.splitlines(keepends=True)[:last])  # whole lines, exactly
    pieces, start = [body], last + 1
    while start <= 1500:
        head, piece = box.call("read_file", {"path": "candidate/long.cuh", "start_line": start}).text.split("\n", 1)
        assert head.startswith(f"`candidate/long.cuh`: lines {start}-")
        pieces.append(piece)
        start = int(head.split(f"lines {start}-")[1].split(" ")[0]) + 1
    assert "".join(pieces) == long and len(pieces) == 3  # 150 kB in pieces of at most 50 kB, nothing lost
    assert "def run" in box.call("read_file", {"path": "definition/reference.py"}).text
    assert "BLOCK" in box.call("read_file", {"path": "template/template.toml"}).text
    assert box.call("read_file", {"path": "../etc/passwd"}).text.startswith("error:")


def test_tool_arguments_are_validated_before_anything_runs(tmp_path):
    with pytest.raises(ToolArgumentError, match="unknown tool"):
        validate("rm", {})
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        validate("apply_patch", '{"diff": ')
    with pytest.raises(ToolArgumentError, match="missing \\['diff'\\]"):
        validate("apply_patch", {})
    with pytest.raises(ToolArgumentError, match="trials must be integer"):
        validate("gate", {"trials": "3"})
    box = toolbox(tmp_path)
    out = box.call("render_template", {"params": {"BLOCK": 100}})
    assert not out.ok and "BLOCK=100 not in" in out.text  # a tool error goes back to the model as text
    assert box.call("gate", {}).text.startswith("not gated: no GPU")
    assert box.call("bench", {}).text.startswith("not timed: no GPU")
    assert box.ws.params == render.default_params("toy_scale", TOY_ROOT)


def test_the_device_pool_gives_each_gate_its_own_gpu():
    pool = DevicePool(["cuda:0", "cuda:1"])
    held, peak, lock = set(), [0], threading.Lock()

    def gate():
        with pool.acquire() as device:
            with lock:
                assert device not in held
                held.add(device)
                peak[0] = max(peak[0], len(held))
            time.sleep(0.05)
            with lock:
                held.discard(device)

    threads = [threading.Thread(target=gate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2 and DevicePool([]).devices == ["cpu"]


def test_a_scripted_patch_run_replays_byte_for_byte(tmp_path):
    point = {"BLOCK": 64, "UNROLL": 1, "VECTOR": False}
    diff = ("--- a/toy_kernel.cuh\n+++ b/toy_kernel.cuh\n@@ -3,2 +3,3 @@\n template <int BLOCK, int UNROLL, "
            "bool VECTOR>\n+// scripted: restrict-qualified pointers already; note only\n __global__ void "
            "__launch_bounds__(BLOCK) toy_scale(const float* __restrict__ x, float* __restrict__ y, float a,\n")
    script = {"model": "scripted/toy", "replies": {
        "planner": [{"content": fenced({"parent": None, "direction": "d", "template": "toy_scale",
                                        "params": point})},
                    {"content": fenced({"parent": "c0001", "direction": "again", "template": "toy_scale",
                                        "params": point})}],
        "coder": [{"tool_calls": [{"name": "render_template", "arguments": {"params": point}}]},
                  {"tool_calls": [{"name": "apply_patch", "arguments": {"diff": diff}},
                                  {"name": "finish", "arguments": {"summary": "one comment"}}]},
                  {"tool_calls": [{"name": "finish", "arguments": {"summary": "nothing"}}]}]}}
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    common = dict(definitions=[DEF], template="toy_scale", templates_root=TOY_ROOT, compile_check="never",
                  max_iters=2)
    summary = run(RunConfig(run_dir=tmp_path / "a", backend="scripted", script=path, **common), hooks=CpuHooks())
    a = jsonl.read(tmp_path / "a" / "candidates.jsonl")
    assert a[0]["overlay_files"] == ["toy_kernel.cuh"] and a[0]["patches"] == 1
    assert a[1]["statuses"]["duplicate"] == "duplicate of c0001 (identical sources)"  # finish without a change
    assert summary["model_calls"] == {"total": 5, "ok": 5}
    run(RunConfig(run_dir=tmp_path / "b", backend="replay", replay_from=tmp_path / "a", **common), hooks=CpuHooks())
    b = jsonl.read(tmp_path / "b" / "candidates.jsonl")
    keys = ("id", "parent", "params", "overlay_files", "sources_sha256", "decision", "reason")
    assert [{k: r[k] for k in keys} for r in b] == [{k: r[k] for k in keys} for r in a]
    src = tmp_path / "b" / "candidates" / "c0001" / "package" / "solution" / "python" / "toy_kernel.cuh"
    assert "// scripted: restrict-qualified" in src.read_text()


def test_list_files_names_every_readable_path(tmp_path):
    from sdk.agent.skills import SKILLS
    box = toolbox(tmp_path, skills_root=SKILLS, references={"notes.md": "radix select"})
    text = box.call("list_files", {}).text
    assert "- main.py: " in text and "template/NAME (main.py.j2, template.toml, toy_kernel.cu.j2" in text
    assert "dsa-domain" in text and "references/NAME (notes.md)" in text
    assert box.call("read_file", {"path": "references/notes.md"}).text.endswith("radix select")
    assert box.call("read_file", {"path": "main.py", "start_line": 500}).text.startswith("error: main.py has ")
