"""Peers: registry shape, availability without the packages, and the pure-torch glue against the references."""
from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sdk import definitions
from sdk import peers
from sdk.peers import glue
from sdk.peers import moe as moe_peers
from sdk.peers.repack import SGLANG_MOE_KERNELS, VLLM_MOE_CONFIGS

ROOT = Path(__file__).resolve().parent.parent

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

def _moe_inputs(T: int, seed: int, offset: int = 32, H: int = 7168, I: int = 2048):
    """Full-size MoE inputs that fit a CPU test: the 32 experts share one fp8 weight tensor (expanded views) and
    differ by their block scales; router logits favour two of this rank's experts so every token has local work
    and few experts are dequantised. Smaller H and I keep the layouts (for glue tests that skip the reference)."""
    g = torch.Generator().manual_seed(seed)
    E, El = 256, 32

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


# ---- MoE: sglang's Triton fused_moe_kernel peer ------------------------------------------------------------------

def carried_file(dist: str, version: str, member: str, tmp_path: Path) -> Path:
    """`member` of the trimmed wheel `fib-sdk env wheels` put in this checkout's .whl/, extracted (skip if absent)."""
    wheel = next(iter(sorted((ROOT / ".whl").glob(f"{dist}-{version}-*.whl"))), None)
    if wheel is None:
        pytest.skip(f"no {dist}-{version} wheel in {ROOT / '.whl'} (python -m sdk env wheels --only {dist})")
    with zipfile.ZipFile(wheel) as z:
        return Path(z.extract(member, tmp_path))


TUNED = {1: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 4},
         64: {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
              "num_stages": 4},
         128: {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 32, "num_warps": 8,
               "num_stages": 3}}


def test_tuned_config_is_the_entry_nearest_the_token_count_with_block_k_capped(tmp_path):
    path = tmp_path / moe_peers.config_file_name("NVIDIA H200")
    assert path.name == "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    path.write_text(json.dumps({"triton_version": "3.4.0", **{str(k): v for k, v in TUNED.items()}}))
    configs = moe_peers.load_tuned_configs(path)
    assert sorted(configs) == [1, 64, 128]  # the file's triton_version is not a batch size
    pick = moe_peers.pick_config
    assert pick(configs, 1)["BLOCK_SIZE_M"] == 16 and pick(configs, 32)["BLOCK_SIZE_M"] == 16  # 32: tie -> smaller
    assert pick(configs, 33)["BLOCK_SIZE_M"] == 64 and pick(configs, 95)["GROUP_SIZE_M"] == 1
    big = pick(configs, 14107)
    assert big == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32, "num_warps": 8,
                   "num_stages": 3}  # K tile 256 -> 128: one activation scale per K step
    assert configs[128]["BLOCK_SIZE_K"] == 256  # the pick copies, the table stays as read
    with pytest.raises(ValueError):
        pick({}, 4)


def test_the_carried_vllm_config_is_the_h200_file_for_this_slice(tmp_path):
    member = f"{VLLM_MOE_CONFIGS}/{moe_peers.config_file_name('NVIDIA H200')}"
    configs = moe_peers.load_tuned_configs(carried_file("vllm", moe_peers.VLLM_VERSION, member, tmp_path))
    assert min(configs) == 1 and max(configs) == 4096
    assert moe_peers.pick_config(configs, 7)["BLOCK_SIZE_M"] == 16      # decode sizes: 16-row tiles (swap_ab)
    assert moe_peers.pick_config(configs, 901)["BLOCK_SIZE_M"] == 64
    assert all(moe_peers.pick_config(configs, t)["BLOCK_SIZE_K"] == 128 for t in (1, 2048, 3000, 14107))


def test_load_file_with_stubs_answers_only_the_stubbed_imports(tmp_path):
    src = tmp_path / "vendored.py"
    src.write_text("import json\nfrom fakepkg.sub.utils import flag, double\n"
                   "VALUE = double(21) if flag() else 0\n\n"
                   "def later():\n    from fakepkg.sub.utils import flag\n    return flag()\n")
    mod = peers.load_file_with_stubs(src, "_fib_test_vendored", {"fakepkg.sub.utils": {"flag": lambda: True,
                                                                                      "double": lambda x: 2 * x}})
    assert mod.VALUE == 42 and mod.later() is True and mod.json is json and mod.__file__ == str(src)
    assert "fakepkg" not in sys.modules and "fakepkg.sub.utils" not in sys.modules
    with pytest.raises(ImportError, match="double"):
        peers.load_file_with_stubs(src, "_fib_test_vendored2", {"fakepkg.sub.utils": {"flag": lambda: True}})
    assert "_fib_test_vendored2" not in sys.modules  # a failed load leaves nothing behind
    with pytest.raises(ModuleNotFoundError):
        peers.load_file_with_stubs(src, "_fib_test_vendored3", {})


def test_the_carried_sglang_kernel_file_loads_with_the_peers_stubs(tmp_path):
    """The real 0.5.16 module, with triton stubbed too (CPU): it imports nothing else of sglang, and
    fused_moe_kernel's parameters are exactly the names the peer passes."""
    path = carried_file("sglang", moe_peers.SGLANG_VERSION, SGLANG_MOE_KERNELS, tmp_path)
    stubs = {**moe_peers.sglang_stubs(), "triton": {"jit": lambda fn: fn}, "triton.language": {}}
    mod = peers.load_file_with_stubs(path, "_fib_test_sglang_kernels", stubs)
    assert tuple(inspect.signature(mod.fused_moe_kernel).parameters) == moe_peers.KERNEL_PARAMS
    assert mod.should_enable_swap_ab(16, 128) is moe_peers._sm90() and mod.padding_size == 0


class EmulatedFusedMoeKernel:
    """fused_moe_kernel's arithmetic for the arguments the peer passes (FP8 [128, 128] block scales, top_k 1,
    c_sorted), in fp32 on the CPU, reading every tensor through the strides it is given."""

    arg_names = moe_peers.KERNEL_PARAMS

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda **kw: self.launch(grid, kw)

    @staticmethod
    def strided(t, shape, strides):
        return t.as_strided(shape, strides, t.storage_offset())

    def launch(self, grid, kw):
        self.launches.append((grid, kw))
        assert set(kw) == set(moe_peers.KERNEL_PARAMS) | {"num_warps", "num_stages"}
        assert kw["use_fp8_w8a8"] and kw["c_sorted"] and kw["filter_expert"] and kw["top_k"] == 1
        assert not (kw["MUL_ROUTED_WEIGHT"] or kw["use_int8_w8a8"] or kw["FUSE_SUM_ALL_REDUCE"] or kw["MASK_OUTPUT"])
        assert kw["group_n"] == kw["group_k"] == 128 and kw["BLOCK_SIZE_K"] <= 128
        N, K, EM, n_valid, bm, bn = (kw[k] for k in ("N", "K", "EM", "num_valid_tokens", "BLOCK_SIZE_M",
                                                     "BLOCK_SIZE_N"))
        assert grid == (-(-EM // bm) * -(-N // bn),) and kw["even_Ks"] == (K % kw["BLOCK_SIZE_K"] == 0)
        E = kw["b_ptr"].shape[0]
        a = self.strided(kw["a_ptr"].view(torch.uint8), (n_valid, K), (kw["stride_am"], kw["stride_ak"]))
        a_s = self.strided(kw["a_scale_ptr"], (n_valid, K // 128), (kw["stride_asm"], kw["stride_ask"]))
        b = self.strided(kw["b_ptr"], (E, N, K), (kw["stride_be"], kw["stride_bn"], kw["stride_bk"]))
        b_s = self.strided(kw["b_scale_ptr"], (E, N // 128, K // 128), (kw["stride_bse"], kw["stride_bsn"],
                                                                          kw["stride_bsk"]))
        c = self.strided(kw["c_ptr"], (EM, N), (kw["stride_cm"], kw["stride_cn"]))
        ids, experts = kw["sorted_token_ids_ptr"].long(), kw["expert_ids_ptr"]
        dequantised = {}
        for block in range(-(-EM // bm)):
            if block * bm >= int(kw["num_tokens_post_padded_ptr"][0]):
                continue
            e = int(experts[block])
            assert e >= 0  # the peer's segments never leave a block without an expert
            if e not in dequantised:
                dequantised[e] = (b[e].to(torch.float32).view(N // 128, 128, K // 128, 128)
                                  * b_s[e][:, None, :, None]).reshape(N, K)
            rows = ids[block * bm:(block + 1) * bm]
            keep = rows < n_valid
            src = rows[keep]
            x = (a[src].view(kw["a_ptr"].dtype).to(torch.float32).view(-1, K // 128, 128)
                 * a_s[src][:, :, None]).reshape(-1, K)
            c[block * bm + torch.nonzero(keep).squeeze(1)] = (x @ dequantised[e].t()).to(torch.bfloat16)


def emulated_kernels():
    return SimpleNamespace(fused_moe_kernel=EmulatedFusedMoeKernel(), tl=SimpleNamespace(bfloat16="bf16"),
                           should_enable_swap_ab=lambda m, n: m < 64 and n >= 64)


@pytest.mark.parametrize("T", [3, 70])
def test_triton_peer_glue_equals_the_gathered_pipeline_with_an_emulated_kernel(T):
    """Everything but the Triton kernel itself: sorted_token_ids, expert_ids, strides, the MN-major scales read in
    place, masked padding rows, the config's M tile as the permutation's alignment."""
    inputs = _moe_inputs(T, seed=T, H=256, I=256)
    kernels = emulated_kernels()
    run = moe_peers.triton_moe_call(inputs, kernels, TUNED)
    (got,) = run()
    bm = 16 if T < 32 else 64
    assert run.config["BLOCK_SIZE_M"] == bm and run.config["swap_ab"] is (bm < 64)
    expected = glue.moe_forward(moe_peers._host_scalars(inputs), glue.reference_grouped_gemm, align=bm)
    assert got.dtype == torch.bfloat16 and got.shape == (T, 256)
    torch.testing.assert_close(got.float(), expected.float(), rtol=1e-2, atol=1e-3)
    (g1_grid, g1), (_, g2) = kernels.fused_moe_kernel.launches
    assert g1["a_ptr"] is inputs["hidden_states"] and g1["num_valid_tokens"] == T  # no gather: rows by index
    assert (g1["stride_asm"], g1["stride_ask"]) == (1, T)  # the [H/128, T] scales, in place
    assert g1["N"] == 512 and g2["N"] == 256 and g1["EM"] == g2["EM"] and g1["EM"] % bm == 0
    padding = g1["sorted_token_ids_ptr"] >= T
    assert padding.any() and torch.equal(g2["sorted_token_ids_ptr"] >= g1["EM"], padding)


def test_indirect_and_gathered_pipelines_agree_with_the_stand_in_gemm():
    inputs = moe_peers._host_scalars(_moe_inputs(5, seed=7, H=256, I=256))
    a = glue.moe_forward(inputs, glue.reference_grouped_gemm, align=16)
    b = glue.moe_forward(inputs, glue.reference_grouped_gemm, align=16, indirect=True)
    assert torch.equal(a, b)


def test_routing_untimed_peers_route_in_prepare_and_give_the_same_output(monkeypatch):
    """The "routing untimed" variants do routing and permutation once, in prepare: the timed call never routes
    (routing raising inside it proves it) and returns what the timed-routing pipeline returns."""
    inputs = _moe_inputs(5, seed=3, H=256, I=256)
    expected = glue.moe_forward(moe_peers._host_scalars(inputs), glue.reference_grouped_gemm, align=16)
    run = moe_peers.triton_moe_call(inputs, emulated_kernels(), TUNED, routing_untimed=True)

    def no_routing(*args, **kwargs):
        raise AssertionError("routed inside the timed call")
    monkeypatch.setattr(glue, "route", no_routing)
    (got,) = run()
    torch.testing.assert_close(got.float(), expected.float(), rtol=1e-2, atol=1e-3)
    names = {p.name for p in moe_peers.PEERS}
    assert {f"{p.name}, routing untimed" for p in moe_peers.PEERS if not p.routing_untimed} <= names
    assert all("outside the timed region" in p.note for p in moe_peers.PEERS if p.routing_untimed)


@pytest.mark.slow
def test_triton_peer_pipeline_matches_the_reference_with_an_emulated_kernel():
    inputs = _moe_inputs(T=2, seed=0)
    expected = definitions.reference(MOE)(**inputs)
    (got,) = moe_peers.triton_moe_call(inputs, emulated_kernels(), TUNED)()
    diff, ref = got.float() - expected.float(), expected.float()
    assert float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref)) < 0.02


def test_triton_peer_says_what_is_missing_in_one_line(monkeypatch):
    peer = moe_peers.SglangTritonMoe()
    monkeypatch.setattr(moe_peers, "installed_path", lambda _path: None)
    ok, reason = peer.available()
    assert not ok and "\n" not in reason and "sglang==0.5.16 + vllm==0.26.0" in reason and "not importable" in reason
    monkeypatch.setattr(moe_peers, "installed_path", lambda path: Path("/x") / path)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "triton" else object())
    ok, reason = peer.available()
    assert not ok and reason.startswith("triton not importable")


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


TRITON_WORKLOADS = {"b8f4f012": 16, "8f1ff9f1": 64, "1a4c6ba1": 64}  # T = 7, 80, 901 -> the tuned file's M tile


@pytest.mark.gpu
@pytest.mark.parametrize("uuid", sorted(TRITON_WORKLOADS))
def test_sglang_triton_peer_matches_the_reference_on_the_gpu(uuid):
    """Contest rule and strict verdict on three official sizes (16-row swap_ab tiles and 64-row tiles), then again
    after an expert's weights are re-drawn in place, as the gate does between calls."""
    from sdk import inputs as inputs_mod, workloads
    from sdk.gate import strict
    from sdk.gate.compare import check, contest_tolerance

    peer = moe_peers.SglangTritonMoe()
    ok, reason = peer.available()
    if not ok:
        pytest.skip(f"{peer.name}: {reason}")
    definition = definitions.load(MOE)
    (workload,) = workloads.select(MOE, [uuid])
    inputs = inputs_mod.make_inputs(definition, workload, seed=0, device="cuda")
    run = peer.prepare(inputs)
    bm = TRITON_WORKLOADS[uuid]
    assert run.config["BLOCK_SIZE_M"] == bm and run.config["BLOCK_SIZE_K"] == 128 and run.config["swap_ab"] is (bm < 64)
    for redraw in (False, True):
        if redraw:
            experts, _ = glue.route(inputs["routing_logits"], inputs["routing_bias"], inputs["routed_scaling_factor"])
            local = experts.flatten().long() - int(inputs["local_expert_offset"])
            busiest = int(torch.bincount(local[(local >= 0) & (local < 32)], minlength=32).argmax())
            fresh = torch.randn(inputs["gemm1_weights"].shape[1:], device="cuda").clamp(-2, 2)
            inputs["gemm1_weights"][busiest].copy_(fresh.to(torch.float8_e4m3fn))
        ref = definitions.reference(MOE)(**inputs)
        outs = tuple(run())
        verdict = check(MOE, list(definition.outputs), outs, (ref,), contest_tolerance(MOE), inputs)
        assert verdict.passed, f"redraw={redraw}: {verdict.reason}"
        strict_ok, why = strict.verdict(MOE, verdict)
        assert strict_ok, f"redraw={redraw}: {why} ({verdict.extra})"
