"""Official FlashInfer-Bench definitions from disk (flashinfer-trace and flat layouts) beside the SDK's own."""
import json
import os
import shutil

import pytest
import torch

from sdk import definitions, inputs, workloads
from sdk.cli import main
from sdk.definitions import sources
from sdk.errors import BadInputError
from tests.helpers import cli_runner, ATTENTION, INDEXER, MOE, small_attention, small_indexer

COUNTS = {MOE: 19, INDEXER: 128, ATTENTION: 23}


@pytest.fixture(autouse=True)
def no_dataset(monkeypatch):
    """Each test starts with the SDK's own files and leaves the environment as it found it."""
    monkeypatch.delenv(sources.DATASET_ENV, raising=False)
    yield
    os.environ.pop(sources.DATASET_ENV, None)  # set by use_dataset / --definitions, not through monkeypatch


@pytest.fixture(params=["contest", "flashinfer-trace"])
def official_root(request, shared_contest):
    root = shared_contest.parent / request.param
    if not (root / "definitions").is_dir():
        pytest.skip(f"{root} not found")
    return root


def flat_dataset(tmp_path, shared_contest, *names, reference=None):
    """A flat-layout dataset holding copies of some official definitions (optionally with another reference)."""
    for name in names:
        raw = json.loads((shared_contest / "definitions" / f"{name}.json").read_text())
        if reference is not None:
            raw["reference"] = reference
        (tmp_path / "definitions").mkdir(parents=True, exist_ok=True)
        (tmp_path / "definitions" / f"{name}.json").write_text(json.dumps(raw))
    return tmp_path


def test_both_layouts_load_the_official_definitions_and_workloads(official_root):
    loaded = sources.load_definitions(official_root)
    assert set(loaded) == set(COUNTS)
    for name, item in loaded.items():
        assert item.source == sources.OFFICIAL and item.path.is_relative_to(official_root.resolve())
        assert item.sha256 == sources.sha256_of(item.path)
        assert item.definition.reference == json.loads(item.path.read_text())["reference"]
        assert [w.uuid for w in item.workloads] == [w.uuid for w in sources.own(name).workloads]
        assert len(item.workloads) == COUNTS[name]


def test_an_active_dataset_replaces_definition_reference_and_workloads(official_root):
    sdk_reference = definitions.load(INDEXER).reference
    sources.use_dataset(official_root)
    official = json.loads(sources.active(INDEXER).path.read_text())["reference"]
    assert official != sdk_reference
    assert definitions.load(INDEXER).reference == definitions.reference_source(INDEXER) == official
    assert definitions.reference(INDEXER).__module__.startswith("fib_reference_official")
    assert workloads.load(INDEXER) == sources.active(INDEXER).workloads
    assert hasattr(definitions.reference_module(INDEXER), "dequant_k_cache")  # the gate's helpers stay the SDK's
    sources.use_dataset(None)
    assert definitions.load(INDEXER).reference == sdk_reference


def test_gate_reference_is_the_datasets_own_code(tmp_path, shared_contest):
    marker = "import torch\n\ndef run(*args):\n    return 'official marker'\n"
    sources.use_dataset(flat_dataset(tmp_path, shared_contest, ATTENTION, reference=marker))
    assert definitions.reference(ATTENTION)() == "official marker"
    assert set(sources.references(ATTENTION)) == {sources.OWN, sources.OFFICIAL}


def test_missing_definitions_fall_back_and_say_so(tmp_path, shared_contest):
    sources.use_dataset(flat_dataset(tmp_path, shared_contest, ATTENTION))
    env = sources.environment_definitions()
    assert set(env) == set(COUNTS)
    assert env[ATTENTION]["source"] == "official" and env[ATTENTION]["path"].startswith(str(tmp_path.resolve()))
    assert env[ATTENTION]["workloads"]["path"] == f"sdk/workloads/{ATTENTION}.jsonl"  # none in the dataset
    assert env[MOE] == {"source": "fib-sdk", "path": f"sdk/definitions/{MOE}.json",
                        "sha256": sources.sha256_of(definitions.HERE / f"{MOE}.json"),
                        "workloads": {"path": f"sdk/workloads/{MOE}.jsonl",
                                      "sha256": sources.sha256_of(workloads.HERE / f"{MOE}.jsonl")}}


def test_both_references_run_on_cpu_and_agree(official_root):
    sources.use_dataset(official_root)
    x = inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=2, num_pages=40), seed=1)
    refs = sources.references(ATTENTION)
    (ours_out, ours_lse), (theirs_out, theirs_lse) = refs["fib-sdk"](**x), refs["official"](**x)
    torch.testing.assert_close(ours_lse, theirs_lse, rtol=1e-5, atol=1e-5)
    assert (ours_out.float() - theirs_out.float()).abs().max() <= 2 ** -6
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer(batch_size=2, max_num_pages=4, num_pages=20))
    (ours,), (theirs,) = sources.references(INDEXER)["fib-sdk"](**x), sources.references(INDEXER)["official"](**x)
    assert [set(r.tolist()) for r in ours] == [set(r.tolist()) for r in theirs]


def test_ambiguous_and_mislabelled_datasets_are_rejected(tmp_path, shared_contest):
    root = flat_dataset(tmp_path / "a", shared_contest, ATTENTION)
    (root / "definitions" / "dsa_paged").mkdir()
    shutil.copy(root / "definitions" / f"{ATTENTION}.json", root / "definitions" / "dsa_paged")
    with pytest.raises(BadInputError, match="appears 2 times"):
        sources.load_definitions(root)
    other = flat_dataset(tmp_path / "b", shared_contest, ATTENTION)
    (other / "definitions" / f"{ATTENTION}.json").rename(other / "definitions" / "renamed.json")
    with pytest.raises(BadInputError, match="the file name says"):
        sources.load_definitions(other, names=["renamed"])
    with pytest.raises(BadInputError, match="not a FlashInfer-Bench dataset"):
        sources.use_dataset(tmp_path)


def test_cli_definitions_option_reaches_every_reader(official_root):
    runner = cli_runner()
    shown = runner.invoke(main, ["env", "definitions", "--definitions", str(official_root), "--json"])
    assert shown.exit_code == 0, shown.output
    assert {e["source"] for e in json.loads(shown.output).values()} == {"official"}
    listed = runner.invoke(main, ["workloads", INDEXER, "--definitions", str(official_root), "--json"])
    assert listed.exit_code == 0 and len(json.loads(listed.output)) == 128
    assert runner.invoke(main, ["env", "definitions", "--json"]).exit_code == 0


def test_gate_workers_grade_against_the_active_datasets_reference(tmp_path, shared_contest):
    from sdk import solutions
    from sdk.gate import contest_tolerance, gate_solution

    zeros = ("import torch\n\ndef run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):\n"
             "    n, h, d = q_nope.shape\n"
             "    return torch.zeros(n, h, d, dtype=torch.bfloat16), torch.zeros(n, h, dtype=torch.float32)\n")
    sources.use_dataset(flat_dataset(tmp_path, shared_contest, ATTENTION, reference=zeros))
    package = next(p for p in solutions.discover() if p.solution.definition == ATTENTION and "baseline" in p.name)
    (result,) = gate_solution(package.solution, ATTENTION, [small_attention(num_tokens=1, num_pages=40)], trials=1,
                              tol=contest_tolerance(ATTENTION), timeout_s=120)
    assert result.status == "INCORRECT_NUMERICAL", result.reason  # the honest baseline disagrees with that reference
