"""Floors: bytes and FLOPs from concrete inputs, checked against hand-computed counts on small synthetic inputs."""
import pytest
import torch

from sdk.bench import floors
from sdk.bench.floors import ATTENTION, INDEXER, MOE, Ceilings, Work
from sdk.errors import BadInputError

FP8 = torch.float8_e4m3fn
META = "meta"  # weights and caches only need shapes: no memory is allocated


def moe_inputs(logits: torch.Tensor, offset: int) -> dict:
    T = logits.shape[0]
    return {
        "routing_logits": logits,
        "routing_bias": torch.zeros(256, dtype=torch.bfloat16),
        "hidden_states": torch.empty(T, 7168, dtype=FP8, device=META),
        "hidden_states_scale": torch.empty(56, T, dtype=torch.float32, device=META),
        "gemm1_weights": torch.empty(32, 4096, 7168, dtype=FP8, device=META),
        "gemm1_weights_scale": torch.empty(32, 32, 56, dtype=torch.float32, device=META),
        "gemm2_weights": torch.empty(32, 7168, 2048, dtype=FP8, device=META),
        "gemm2_weights_scale": torch.empty(32, 56, 16, dtype=torch.float32, device=META),
        "local_expert_offset": offset,
        "routed_scaling_factor": 2.5,
    }


def routed_logits(T: int) -> torch.Tensor:
    """Every token routes to experts 0, 1 (group 0) and 32..37 (group 1): 8 experts, all other logits low."""
    logits = torch.full((T, 256), -8.0)
    logits[:, [0, 1]] = 6.0
    logits[:, 32:38] = 5.0
    return logits


EXPERT_BYTES = 4096 * 7168 + 32 * 56 * 4 + 7168 * 2048 + 56 * 16 * 4  # fp8 W13 + W2 and their f32 block scales
EXPERT_FLOPS = 2 * (4096 * 7168 + 7168 * 2048)


def moe_io_bytes(T: int) -> int:
    return T * 7168 + 56 * T * 4 + T * 256 * 4 + 256 * 2 + T * 7168 * 2  # activations, scales, logits, bias, out


def test_moe_counts_only_the_two_local_experts_hit():
    T = 3
    w = floors.work(MOE, moe_inputs(routed_logits(T), offset=0))
    assert w.detail["active_local_experts"] == 2
    assert w.detail["assignments"] == 2 * T
    assert w.detail["tokens_per_local_expert"][:3] == [T, T, 0]
    assert w.bytes == 2 * EXPERT_BYTES + moe_io_bytes(T)
    assert w.flops == EXPERT_FLOPS * 2 * T
    assert w.matrix == "fp8"


def test_moe_other_rank_sees_the_other_six_experts():
    T = 5
    w = floors.work(MOE, moe_inputs(routed_logits(T), offset=32))
    assert (w.detail["active_local_experts"], w.detail["assignments"]) == (6, 6 * T)
    assert w.bytes == 6 * EXPERT_BYTES + moe_io_bytes(T)


def test_moe_rank_without_routed_tokens_moves_no_weights():
    w = floors.work(MOE, moe_inputs(routed_logits(2), offset=64))
    assert (w.detail["active_local_experts"], w.flops, w.bytes) == (0, 0, moe_io_bytes(2))


def test_indexer_reads_only_the_rows_inside_seq_len_of_the_rows_it_must_score():
    B, M, P = 3, 33, 99
    lens = torch.tensor([100, 2048, 2049], dtype=torch.int32)  # rows of <= top-k tokens select all: nothing to score
    inputs = {"q_index_fp8": torch.zeros(B, 64, 128, dtype=FP8),
              "k_index_cache_fp8": torch.empty(P, 64, 1, 132, dtype=torch.int8, device=META),
              "weights": torch.zeros(B, 64), "seq_lens": lens,
              "block_table": torch.zeros(B, M, dtype=torch.int32)}
    w = floors.work(INDEXER, inputs)
    tokens = 2049
    used_pages = 2 + 32 + 33   # every row's table entries (its output ids)
    assert w.bytes == tokens * 132 + 64 * 128 + 64 * 4 + B * 4 + used_pages * 4 + B * 2048 * 4
    assert w.flops == tokens * 64 * 128 * 2
    assert (w.matrix, w.detail["tokens_scored"], w.detail["rows_scored"]) == ("fp8", tokens, 1)


def test_attention_gathers_only_valid_indices():
    N = 2
    indices = torch.full((N, 2048), -1, dtype=torch.int32)
    indices[0, :10] = torch.arange(10)  # row 1 has no valid index at all
    inputs = {"q_nope": torch.zeros(N, 16, 512, dtype=torch.bfloat16),
              "q_pe": torch.zeros(N, 16, 64, dtype=torch.bfloat16),
              "ckv_cache": torch.empty(8, 64, 512, dtype=torch.bfloat16, device=META),
              "kpe_cache": torch.empty(8, 64, 64, dtype=torch.bfloat16, device=META),
              "sparse_indices": indices, "sm_scale": 0.1352}
    w = floors.work(ATTENTION, inputs)
    q_bytes = N * 16 * 512 * 2 + N * 16 * 64 * 2
    out_bytes = N * 16 * 512 * 2 + N * 16 * 4
    assert w.bytes == 10 * 576 * 2 + q_bytes + N * 2048 * 4 + out_bytes
    assert w.flops == 10 * 16 * (576 + 512) * 2
    assert (w.matrix, w.detail["valid_indices"]) == ("bf16", 10)


def test_floor_is_the_larger_of_memory_and_compute_time():
    ceilings = Ceilings(hbm_bytes_per_s=4e12, fp8_flops_per_s=1e15, bf16_flops_per_s=5e14)
    memory_bound = Work(bytes=8_000_000_000, flops=10**12, matrix="fp8")  # 2 ms vs 1 ms
    compute_bound = Work(bytes=4_000_000, flops=10**12, matrix="bf16")  # 0.001 ms vs 2 ms
    assert floors.floor_ms(memory_bound, ceilings) == pytest.approx(2.0)
    assert floors.floor_terms(memory_bound, ceilings)["bound"] == "memory"
    assert floors.floor_ms(compute_bound, ceilings) == pytest.approx(2.0)
    assert floors.floor_terms(compute_bound, ceilings)["bound"] == "compute"


def test_floor_without_a_measured_rate_falls_back_to_the_memory_term():
    ceilings = Ceilings(hbm_bytes_per_s=4e12, fp8_flops_per_s=None, bf16_flops_per_s=5e14,
                        notes={"fp8_reason": "no _scaled_mm"})
    w = Work(bytes=4_000_000_000, flops=10**15, matrix="fp8")
    assert floors.floor_terms(w, ceilings)["compute_ms"] is None
    assert floors.floor_ms(w, ceilings) == pytest.approx(1.0)
    assert Ceilings.from_dict(ceilings.as_dict()) == ceilings


def test_unknown_definition_and_cpu_ceilings_are_user_errors():
    with pytest.raises(BadInputError, match="no floor model"):
        floors.work("gdn_decode", {})
    with pytest.raises(BadInputError, match="CUDA"):
        floors.measure_ceilings("cpu")


@pytest.mark.gpu
def test_measured_ceilings_are_plausible():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: ceilings are measured on the GPU only")
    c = floors.measure_ceilings("cuda", copy_bytes=1 << 30, matmul_size=4096, reps=5)
    assert 1e11 < c.hbm_bytes_per_s < 2e13
    assert 1e12 < c.bf16_flops_per_s < 5e15
    assert c.fp8_flops_per_s is None or c.fp8_flops_per_s > 1e12
