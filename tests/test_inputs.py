import math

import pytest
import torch

from sdk import definitions, inputs, workloads
from sdk.errors import BadInputError
from tests.helpers import ATTENTION, INDEXER, MOE, small_attention, small_indexer


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                                                  b.view(torch.uint8) if b.element_size() == 1 else b)
    return a == b


def test_same_seed_same_inputs_bit_for_bit_and_trials_differ():
    d = definitions.load(INDEXER)
    wl = small_indexer()
    a, b = inputs.make_inputs(d, wl, seed=7, trial=1), inputs.make_inputs(d, wl, seed=7, trial=1)
    c = inputs.make_inputs(d, wl, seed=7, trial=2)
    assert list(a) == list(d.inputs)
    assert all(_same(a[k], b[k]) for k in a)
    assert not _same(a["q_index_fp8"], c["q_index_fp8"])


def test_indexer_inputs_are_consistent():
    d = definitions.load(INDEXER)
    wl = small_indexer(batch_size=6, max_num_pages=9, num_pages=120)
    x = inputs.make_inputs(d, wl, seed=1)
    lens, table = x["seq_lens"], x["block_table"]
    assert lens.dtype == torch.int32 and (lens >= 1).all() and (lens <= 9 * 64).all()
    assert int(lens.max()) > 8 * 64, "the longest row must need every column of the block table"
    assert table.unique().numel() == table.numel() and (table >= 0).all() and (table < 120).all()
    k = definitions.reference_module(INDEXER).dequant_k_cache(x["k_index_cache_fp8"])
    assert torch.isfinite(k).all() and k.abs().max() > 0


def test_k_cache_packing_round_trips():
    k = torch.randn(3, 64, 128, dtype=torch.bfloat16)
    packed = inputs.pack_index_k_cache(k)
    assert packed.shape == (3, 64, 1, 132) and packed.dtype == torch.int8
    back = definitions.reference_module(INDEXER).dequant_k_cache(packed)
    assert float((back - k.float()).abs().max() / k.float().abs().max()) < 0.07  # e4m3 has a 3-bit mantissa


def test_attention_indices_are_valid_distinct_and_padded_at_the_end():
    d = definitions.load(ATTENTION)
    x = inputs.make_inputs(d, small_attention(num_tokens=5, num_pages=40), seed=2)
    idx = x["sparse_indices"]
    for row in idx:
        valid = row[row != -1]
        assert valid.numel() >= 1024 and valid.unique().numel() == valid.numel()
        assert (valid < 40 * 64).all() and (row[valid.numel():] == -1).all()
    assert x["sm_scale"] == pytest.approx(0.1352337788608801)


def test_moe_routing_generators_shapes_and_realism():
    gen = torch.Generator().manual_seed(0)
    draw = inputs.Draw(gen, torch.device("cpu"), {"seq_len": 64, "num_experts": 256}, {})
    logits, bias = inputs.moe_routing_logits(draw), inputs.moe_routing_bias(draw)
    assert logits.shape == (64, 256) and logits.dtype == torch.float32
    assert bias.shape == (256,) and bias.dtype == torch.bfloat16 and float(bias.float().abs().max()) < 0.2


def test_random_rules_follow_flashinfer_bench():
    draw = inputs.Draw(torch.Generator().manual_seed(0), torch.device("cpu"), {}, {})
    fp8 = inputs.random_tensor(draw, (4096,), torch.float8_e4m3fn).float()
    assert fp8.abs().max() <= 2.0
    ints = inputs.random_tensor(draw, (4096,), torch.int32)
    assert ints.min() >= -1024 and ints.max() < 1024
    i8 = inputs.random_tensor(draw, (4096,), torch.int8).int()
    assert i8.min() >= -128 and i8.max() <= 127 and i8.min() < -100


def test_outputs_are_poisoned():
    d = definitions.load(ATTENTION)
    outs = inputs.alloc_outputs(d, small_attention())
    assert list(outs) == ["output", "lse"] and torch.isnan(outs["output"].float()).all()
    idx = inputs.alloc_outputs(definitions.load(INDEXER), small_indexer())["topk_indices"]
    assert (idx == torch.iinfo(torch.int32).min).all()


def test_dataset_blobs_are_used_when_present(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    wl = small_indexer(batch_size=2, max_num_pages=2, num_pages=10)
    spec = wl.inputs["seq_lens"]
    path = tmp_path / spec.path
    path.parent.mkdir(parents=True)
    save_file({"seq_lens": torch.tensor([5, 100], dtype=torch.int32),
               "block_table": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)}, str(path))
    monkeypatch.setenv("FIB_DATASET_PATH", str(tmp_path))
    x = inputs.make_inputs(definitions.load(INDEXER), wl)
    assert x["seq_lens"].tolist() == [5, 100] and x["block_table"].tolist() == [[1, 2], [3, 4]]
    save_file({"seq_lens": torch.tensor([5], dtype=torch.int32),
               "block_table": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)}, str(path))
    with pytest.raises(BadInputError, match="needs"):
        inputs.make_inputs(definitions.load(INDEXER), wl)
    official = tmp_path / workloads.load(INDEXER)[0].inputs["seq_lens"].path   # a real blob of another shape
    official.parent.mkdir(parents=True, exist_ok=True)
    official.write_bytes(path.read_bytes())
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer("other", batch_size=2, max_num_pages=2, num_pages=10))
    assert x["seq_lens"].shape == (2,)   # small test workloads never read a real blob


def test_workload_lines_are_validated(tmp_path):
    good = (workloads.HERE / f"{MOE}.jsonl").read_text().splitlines()[0]
    path = tmp_path / "w.jsonl"
    path.write_text(good + "\n{broken\n")
    with pytest.raises(BadInputError, match=r"w.jsonl:2"):
        workloads.parse_jsonl(path)
    path.write_text(good.replace('"seq_len"', '"seq_len"', 1).replace('"axes":{', '"axes":{"x":-1,') + "\n")
    with pytest.raises(BadInputError):
        workloads.parse_jsonl(path)
    with pytest.raises(BadInputError, match="matches 0"):
        workloads.select(MOE, ["zzzz"])
    with pytest.raises(BadInputError, match="no value for axes"):
        inputs.make_inputs(definitions.load(MOE), workloads.load(MOE)[0].model_copy(update={"axes": {}}))
    assert math.isfinite(len(workloads.select(MOE, ["b8f4f012"])))
