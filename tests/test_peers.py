"""Peers: registry shape, availability without the packages, and the pure-torch glue against the references."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from sdk import definitions
from sdk import peers
from sdk.peers import glue

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"


# ---- registry --------------------------------------------------------------------------------------------------

def test_registry_covers_every_definition_with_unique_names():
    every = peers.all_peers()
    assert {p.definition for p in every} == set(definitions.names())
    names = [p.name for p in every]
    assert len(names) == len(set(names))
    for p in every:
        assert p.name and p.note and isinstance(p.uses_cuda_graph, bool)
        assert p in peers.peers_for(p.definition)
    assert [p.name for p in peers.peers_for(INDEXER)][0] == "deepgemm+torch.topk"
    assert peers.peers_for("no_such_definition") == []


def test_available_gives_a_reason_when_the_packages_are_missing():
    if any(importlib.util.find_spec(m) for m in ("deep_gemm", "flash_mla", "sgl_kernel", "flashinfer")):
        pytest.skip("a peer package is installed here; this test is about machines without them")
    for p in peers.all_peers():
        ok, reason = p.available()
        assert ok is False and "not importable" in reason and p.pip_names[0].split("=")[0] in reason
        with pytest.raises(RuntimeError, match="not available"):
            p.prepare({})


def test_available_never_raises_even_when_an_import_blows_up(monkeypatch):
    class Broken(peers.Peer):
        name, definition, note = "broken", INDEXER, "test double"
        requires = ("json",)

        def _extra_reason(self):
            raise AssertionError("loader asserted")

    monkeypatch.setattr(peers, "hopper_reason", lambda: "")
    ok, reason = Broken().available()
    assert ok is False and "AssertionError" in reason


def test_import_optional_reports_loader_errors(tmp_path, monkeypatch):
    (tmp_path / "exploding_ext.py").write_text("raise OSError('libcudart.so.13: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module, reason = peers.import_optional("exploding_ext")
    assert module is None and "OSError" in reason and "libcudart" in reason
    assert peers.import_optional("surely_not_a_module_xyz")[1].endswith("is not installed")


# ---- indexer glue ----------------------------------------------------------------------------------------------

def _indexer_inputs(seed: int):
    """Small inputs in the definition's format: 3 rows, 40 pages each (2560 tokens > 2048), two short rows."""
    from sdk.inputs import pack_index_k_cache

    g = torch.Generator().manual_seed(seed)
    B, M, P = 3, 40, 150
    q = torch.randn(B, 64, 128, generator=g).clamp(-2, 2).to(torch.float8_e4m3fn)
    k_cache = pack_index_k_cache(torch.randn(P, 64, 128, generator=g))
    weights = torch.randn(B, 64, generator=g)
    seq_lens = torch.tensor([2560, 1000, 2049], dtype=torch.int32)
    block_table = torch.randperm(P, generator=g)[: B * M].view(B, M).to(torch.int32)
    return {"q_index_fp8": q, "k_index_cache_fp8": k_cache, "weights": weights, "seq_lens": seq_lens,
            "block_table": block_table}


def _indexer_logits(inputs, width: int) -> torch.Tensor:
    """What DeepGEMM's paged MQA logits would return: [B, width] scores by row position, garbage past seq_len."""
    mod = definitions.reference_module(INDEXER)
    k = mod.dequant_k_cache(inputs["k_index_cache_fp8"])  # [P, 64, 128]
    B, M = inputs["block_table"].shape
    rows = k[inputs["block_table"].long()].view(B, M * 64, 128)
    scores = torch.einsum("bhd,btd->bht", inputs["q_index_fp8"].float(), rows).relu()
    scores = (scores * inputs["weights"][:, :, None]).sum(1)
    garbage = torch.full((B, width - M * 64), float("nan"))
    scores = torch.cat([scores, garbage], dim=1)
    past = torch.arange(width)[None, :] >= inputs["seq_lens"].long()[:, None]
    return torch.where(past, torch.full_like(scores, 1e30), scores)  # unwritten columns must not be picked


def test_topk_token_ids_matches_the_reference():
    inputs = _indexer_inputs(0)
    (expected,) = definitions.reference(INDEXER)(**inputs)
    got = glue.topk_token_ids(_indexer_logits(inputs, 2560 + 256), inputs["seq_lens"], inputs["block_table"])
    assert got.dtype == torch.int32 and got.shape == (3, 2048)
    assert torch.equal(got, expected)  # both sorted by score, random data has no ties
    assert int((got[1] >= 0).sum()) == 1000 and bool((got[1, 1000:] == -1).all())


def test_token_ids_translates_padded_positions_like_fast_topk():
    inputs = _indexer_inputs(1)
    (expected,) = definitions.reference(INDEXER)(**inputs)
    logits = _indexer_logits(inputs, 2560)
    # fast_topk_v2 returns unsorted row positions with -1 padding; emulate it with a shuffled, padded torch.topk.
    lens = inputs["seq_lens"].long()
    masked = logits.masked_fill(torch.arange(2560)[None, :] >= lens[:, None], float("-inf"))
    pos = masked.topk(2048, dim=1).indices
    pos = torch.where(torch.arange(2048)[None, :] < lens.clamp(max=2048)[:, None], pos, -1)
    pos = pos[:, torch.randperm(2048, generator=torch.Generator().manual_seed(3))].to(torch.int32)
    got = glue.token_ids(pos, inputs["block_table"], pos >= 0)
    assert torch.equal(got.sort(dim=1).values, expected.sort(dim=1).values)


def test_token_table_is_page_times_64_plus_offset():
    table = torch.tensor([[5, 2], [0, 7]], dtype=torch.int32)
    tokens = glue.token_table(table)
    assert tokens.shape == (2, 128) and tokens.dtype == torch.int32
    assert tokens[0, 0] == 320 and tokens[0, 63] == 383 and tokens[0, 64] == 128 and tokens[1, 127] == 7 * 64 + 63
    pos = torch.tensor([[0, 64, 127]])
    assert torch.equal(tokens[:1].gather(1, pos), glue.token_ids(pos, table[:1], pos >= 0))


# ---- MoE glue --------------------------------------------------------------------------------------------------

def _moe_inputs(T: int, seed: int, offset: int = 32):
    """Full-size MoE inputs that fit a CPU test: the 32 experts share one fp8 weight tensor (expanded views) and
    differ by their block scales; router logits favour two of this rank's experts so every token has local work
    and few experts are dequantised."""
    g = torch.Generator().manual_seed(seed)
    E, H, I, El = 256, 7168, 2048, 32

    def fp8(*shape):
        return torch.randn(*shape, generator=g).clamp(-2, 2).to(torch.float8_e4m3fn)

    logits = torch.randn(T, E, generator=g)
    logits[:, offset: offset + 2] += 6.0
    return {
        "routing_logits": logits,
        "routing_bias": (torch.randn(E, generator=g) * 0.02).to(torch.bfloat16),
        "hidden_states": fp8(T, H),
        "hidden_states_scale": torch.rand(H // 128, T, generator=g) * 0.02 + 0.01,
        "gemm1_weights": fp8(1, 2 * I, H).expand(El, 2 * I, H),
        "gemm1_weights_scale": torch.rand(El, 2 * I // 128, H // 128, generator=g) * 0.02 + 0.01,
        "gemm2_weights": fp8(1, H, I).expand(El, H, I),
        "gemm2_weights_scale": torch.rand(El, H // 128, I // 128, generator=g) * 0.02 + 0.01,
        "local_expert_offset": offset,
        "routed_scaling_factor": 2.5,
    }


def test_route_matches_the_reference_routing():
    mod = definitions.reference_module(MOE)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 256, generator=g) * 2
    bias = (torch.randn(256, generator=g) * 0.05).to(torch.bfloat16)
    ref_experts, ref_dense = mod._route(logits, bias, 2.5)
    experts, weights = glue.route(logits, bias, 2.5)
    assert torch.equal(experts.sort(dim=1).values, ref_experts.sort(dim=1).values)
    torch.testing.assert_close(weights, ref_dense.gather(1, experts), rtol=1e-6, atol=1e-7)


def test_permute_builds_aligned_segments_with_every_local_assignment_once():
    experts = torch.tensor([[0, 5, 40, 33], [33, 2, 5, 39], [200, 201, 202, 203]])
    weights = torch.arange(12, dtype=torch.float32).view(3, 4)
    perm = glue.permute(experts, weights, local_expert_offset=32, num_local=8, align=4)
    # local experts (offset 32, 8 of them): 33 -> 1 (tokens 0, 1), 39 -> 7 (token 1); 40 is foreign.
    assert perm.rows == 8
    assert perm.grouped_layout.tolist() == [1, 1, -1, -1, 7, -1, -1, -1]
    assert perm.row.tolist() == [0, 1, 4] and perm.token.tolist() == [0, 1, 1]
    assert perm.weight.tolist() == [3.0, 4.0, 7.0]
    assert perm.src_token.tolist() == [0, 1, 0, 0, 1, 0, 0, 0]
    empty = glue.permute(experts[2:], weights[2:], 32, 8, 4)
    assert empty.rows == 0 and empty.row.numel() == 0


def test_quant_fp8_1x128_round_trips_with_mn_major_scales():
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(0)) * 3
    q, s = glue.quant_fp8_1x128(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (8, 2) and s.stride() == (1, 8)
    back = (q.float().view(8, 2, 128) * s[:, :, None]).view(8, 256)
    torch.testing.assert_close(back, x, rtol=0.07, atol=1e-3)


@pytest.mark.slow
def test_moe_pipeline_matches_the_reference_with_a_stand_in_gemm():
    """Full-size MoE on the CPU (a few local experts dequantised twice): seconds idle, a minute on a loaded box."""
    inputs = _moe_inputs(T=2, seed=0)
    expected = definitions.reference(MOE)(**inputs)
    got = glue.moe_forward(inputs, glue.reference_grouped_gemm, align=128)
    assert got.dtype == torch.bfloat16 and got.shape == expected.shape
    # Only the FP8 requantisation of the SwiGLU output separates the two: well inside the contest's atol/rtol.
    err = (got.float() - expected.float()).abs()
    assert float(err.max()) <= 0.05 * float(expected.float().abs().max()) + 1e-3
    diff, ref = got.float() - expected.float(), expected.float()
    rel_l2 = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))
    assert rel_l2 < 0.02


def test_moe_pipeline_without_local_work_returns_zeros():
    inputs = _moe_inputs(T=2, seed=1, offset=32)
    inputs["local_expert_offset"] = 224
    inputs["routing_logits"][:, 224:] -= 50.0  # nobody routes to the last group
    out = glue.moe_forward(inputs, glue.reference_grouped_gemm, align=128)
    assert out.shape == (2, 7168) and not out.float().abs().any()


# ---- sparse-attention glue -------------------------------------------------------------------------------------

def test_mla_layouts_put_ckv_then_kpe_and_pad_heads_with_zeros():
    g = torch.Generator().manual_seed(0)
    ckv = torch.randn(3, 64, 512, generator=g).to(torch.bfloat16)
    kpe = torch.randn(3, 64, 64, generator=g).to(torch.bfloat16)
    kv = glue.mla_kv_concat(ckv, kpe)
    assert kv.shape == (192, 1, 576) and kv.is_contiguous()
    assert torch.equal(kv[2 * 64 + 5, 0, :512], ckv[2, 5]) and torch.equal(kv[2 * 64 + 5, 0, 512:], kpe[2, 5])
    qn = torch.randn(4, 16, 512, generator=g).to(torch.bfloat16)
    qp = torch.randn(4, 16, 64, generator=g).to(torch.bfloat16)
    q = glue.mla_query_padded(qn, qp)
    assert q.shape == (4, 64, 576)
    assert torch.equal(q[:, :16, :512], qn) and torch.equal(q[:, :16, 512:], qp) and not q[:, 16:].any()


def test_ragged_from_sparse_keeps_each_rows_valid_ids_in_order():
    idx = torch.tensor([[7, -1, 3, 9], [-1, -1, -1, 2]], dtype=torch.int32)
    indptr, indices, lens = glue.ragged_from_sparse(idx)
    assert indptr.tolist() == [0, 3, 4] and indices.tolist() == [7, 3, 9, 2] and lens.tolist() == [3, 1]
    assert indptr.dtype == indices.dtype == lens.dtype == torch.int32


def test_padded_query_attention_equals_the_reference_on_16_heads():
    """The zero heads FlashMLA adds do not change the 16 real heads (checked with a plain fp32 attention)."""
    g = torch.Generator().manual_seed(0)
    P, T = 70, 2
    inputs = {"q_nope": torch.randn(T, 16, 512, generator=g).to(torch.bfloat16),
              "q_pe": torch.randn(T, 16, 64, generator=g).to(torch.bfloat16),
              "ckv_cache": torch.randn(P, 64, 512, generator=g).to(torch.bfloat16),
              "kpe_cache": torch.randn(P, 64, 64, generator=g).to(torch.bfloat16),
              "sparse_indices": torch.randperm(P * 64, generator=g)[: T * 2048].view(T, 2048).to(torch.int32),
              "sm_scale": 192 ** -0.5}
    inputs["sparse_indices"][1, 1500:] = -1
    out_ref, lse_ref = definitions.reference(ATTENTION)(**inputs)
    q = glue.mla_query_padded(inputs["q_nope"], inputs["q_pe"]).float()          # [T, 64, 576]
    kv = glue.mla_kv_concat(inputs["ckv_cache"], inputs["kpe_cache"])[:, 0].float()  # [P*64, 576]
    idx = inputs["sparse_indices"].long()
    valid = idx >= 0
    rows = kv[idx.clamp(min=0)]                                                     # [T, 2048, 576]
    logits = torch.einsum("thd,tkd->thk", q, rows) * inputs["sm_scale"]
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    out = torch.einsum("thk,tkd->thd", logits.softmax(-1), rows[..., :512])[:, :16].to(torch.bfloat16)
    lse = (torch.logsumexp(logits, -1) / torch.log(torch.tensor(2.0)))[:, :16]
    torch.testing.assert_close(out.float(), out_ref.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


# ---- on the GPU: every available peer passes the gate on one small official workload -------------------------

SMALL_WORKLOAD = {INDEXER: "5f7e6f22", ATTENTION: "385742b2", MOE: "b8f4f012"}


@pytest.mark.gpu
@pytest.mark.parametrize("peer", peers.all_peers(), ids=lambda p: p.name)
def test_peer_passes_the_gate_on_the_gpu(peer):
    from sdk import inputs as inputs_mod, workloads
    from sdk.gate.compare import check, contest_tolerance

    ok, reason = peer.available()
    if not ok:
        pytest.skip(f"{peer.name}: {reason}")
    definition = definitions.load(peer.definition)
    (workload,) = workloads.select(peer.definition, [SMALL_WORKLOAD[peer.definition]])
    inputs = inputs_mod.make_inputs(definition, workload, seed=0, device="cuda")
    value = definitions.reference(peer.definition)(**inputs)
    refs = value if isinstance(value, tuple) else (value,)
    outs = tuple(peer.prepare(inputs)())
    verdict = check(peer.definition, list(definition.outputs), outs, refs, contest_tolerance(peer.definition), inputs)
    assert verdict.passed, verdict.reason
