"""Our definitions, workloads and references against the official contest files in ../shared/contest."""
import json
import math
from types import ModuleType

import pytest
import torch

from sdk import definitions, inputs, workloads
from tests.helpers import ATTENTION, INDEXER, MOE, small_attention, small_indexer

STRUCTURE = ("name", "op_type", "constraints")


def official(shared_contest, name) -> dict:
    return json.loads((shared_contest / "definitions" / f"{name}.json").read_text())


def official_reference(shared_contest, name):
    module = ModuleType(f"official_{name}")
    exec(compile(official(shared_contest, name)["reference"], f"<official {name}>", "exec"), module.__dict__)
    return module.run


@pytest.mark.parametrize("name", [MOE, INDEXER, ATTENTION])
def test_structure_is_identical(shared_contest, name):
    theirs, ours = official(shared_contest, name), json.loads((definitions.HERE / f"{name}.json").read_text())
    for key in STRUCTURE:
        assert ours.get(key) == theirs.get(key), key
    assert list(ours["axes"]) == list(theirs["axes"])
    for axis, spec in theirs["axes"].items():
        assert ours["axes"][axis]["type"] == spec["type"] and ours["axes"][axis].get("value") == spec.get("value")
    for side in ("inputs", "outputs"):
        assert list(ours[side]) == list(theirs[side]), f"{side} names/order"
        for tensor, spec in theirs[side].items():
            assert (ours[side][tensor]["shape"], ours[side][tensor]["dtype"]) == (spec["shape"], spec["dtype"])


@pytest.mark.parametrize("name,count", [(MOE, 19), (INDEXER, 128), (ATTENTION, 23)])
def test_workloads_match_official_list(shared_contest, name, count):
    lines = [json.loads(l) for l in (shared_contest / "workloads" / f"{name}.jsonl").read_text().splitlines() if l]
    ours = workloads.load(name)
    assert len(ours) == count == len(lines)
    for line, mine in zip(lines, ours):
        w = line["workload"]
        assert mine.uuid == w["uuid"] and mine.axes == w["axes"]
        assert {k: v.type for k, v in mine.inputs.items()} == {k: v["type"] for k, v in w["inputs"].items()}
        for key, spec in w["inputs"].items():
            if spec["type"] == "scalar":
                assert mine.inputs[key].value == spec["value"]


def _rescored(x, ids):
    from sdk.gate.compare import indexer_scores

    return torch.sort(indexer_scores(x, ids), dim=1, descending=True).values


def test_indexer_reference_agrees_with_official(shared_contest):
    d = definitions.load(INDEXER)
    for seed, wl in enumerate([small_indexer(), small_indexer(batch_size=4, max_num_pages=3, num_pages=30)]):
        x = inputs.make_inputs(d, wl, seed=seed)
        (theirs,), (ours,) = official_reference(shared_contest, INDEXER)(**x), definitions.reference(INDEXER)(**x)
        for b in range(theirs.shape[0]):  # random fp32 scores have no ties: the same set of tokens
            assert set(theirs[b].tolist()) == set(ours[b].tolist())
        torch.testing.assert_close(_rescored(x, ours), _rescored(x, theirs))


def test_attention_reference_agrees_with_official(shared_contest):
    d = definitions.load(ATTENTION)
    x = inputs.make_inputs(d, small_attention(num_tokens=4), seed=3)
    x["sparse_indices"][1, 1000:] = -1  # padding inside a row
    theirs, ours = official_reference(shared_contest, ATTENTION)(**x), definitions.reference(ATTENTION)(**x)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-5)
    assert (ours[0].float() - theirs[0].float()).abs().max() <= 2 ** -6  # at most bf16 rounding of the same value


@pytest.mark.slow
def test_moe_reference_agrees_with_official(shared_contest):
    """Full-size weights on the CPU (T=3): slow (tens of seconds), but the only honest way to run the original."""
    d = definitions.load(MOE)
    wl = workloads.load(MOE)[0].model_copy(update={"axes": {"seq_len": 3}, "uuid": "moe-small"})
    x = inputs.make_inputs(d, wl, seed=0)
    theirs, ours = official_reference(shared_contest, MOE)(**x), definitions.reference(MOE)(**x)
    assert torch.equal(theirs.view(torch.int16), ours.view(torch.int16)) or \
        torch.allclose(theirs.float(), ours.float(), rtol=1e-2, atol=1e-2 * float(theirs.float().abs().max()))
    assert math.isfinite(float(ours.float().abs().max()))
