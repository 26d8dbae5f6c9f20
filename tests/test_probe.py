"""The bandwidth probe: its byte plans against brute-force counts, its piece list, and (GPU) the kernel itself."""
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from sdk import definitions, inputs
from sdk.bench import floors, probe
from sdk.bench.floors import ATTENTION, INDEXER, MOE, Ceilings, Work
from sdk.errors import BadInputError
from tests.helpers import small_attention, small_indexer
from tests.test_floors import moe_inputs, routed_logits

ROOT = Path(__file__).resolve().parent.parent


def coverage(p: probe.Plan, name: str, size: int) -> torch.Tensor:
    """How many times the plan reads each byte of input `name` (size bytes)."""
    count = torch.zeros(size + 1, dtype=torch.int32)
    for seg in (s for s in p.reads if s.tensor == name):
        for off, n in zip(seg.offsets.tolist(), seg.lengths.tolist()):
            count[off] += 1
            count[off + n] -= 1
    return torch.cumsum(count, 0)[:size].to(torch.int32)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# ---- indexer -------------------------------------------------------------------------------------------------------

def indexer_case(seed=0, **axes):
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer(**axes), seed=seed)
    x["seq_lens"][0] = 0                     # a row that reads nothing
    x["seq_lens"][1] = 64 * 2 + 5            # a partial third page
    return x


def test_indexer_plan_reads_exactly_the_tokens_inside_seq_len():
    x = indexer_case(batch_size=4, max_num_pages=3, num_pages=30)
    cache, table = x["k_index_cache_fp8"], x["block_table"]
    page_bytes = 64 * 132
    want = torch.zeros(nbytes(cache), dtype=torch.int32)
    want_table = torch.zeros(nbytes(table), dtype=torch.int32)
    for b, length in enumerate(x["seq_lens"].tolist()):
        for t in range(length):                                  # token by token, as the reference gathers
            page = int(table[b, t // 64])
            value = page * page_bytes + (t % 64) * 128
            scale = page * page_bytes + 64 * 128 + (t % 64) * 4
            want[value:value + 128] += 1
            want[scale:scale + 4] += 1
        for j in range((length + 63) // 64):
            start = (b * table.shape[1] + j) * 4
            want_table[start:start + 4] += 1
    p = probe.plan(INDEXER, x)
    assert torch.equal(coverage(p, "k_index_cache_fp8", nbytes(cache)), want)
    assert torch.equal(coverage(p, "block_table", nbytes(table)), want_table)
    assert p.read_bytes_by_tensor()["q_index_fp8"] == nbytes(x["q_index_fp8"])
    assert p.write_bytes == 4 * 2048 * 4


@pytest.mark.parametrize("name,make", [
    (INDEXER, lambda: indexer_case(seed=1)),
    (ATTENTION, lambda: inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=2, num_pages=40),
                                           seed=2)),
    (MOE, lambda: moe_inputs(routed_logits(3), offset=32)),
])
def test_plan_moves_the_floor_models_bytes(name, make):
    x = make()
    p, w = probe.plan(name, x), floors.work(name, x)
    assert p.read_bytes + p.write_bytes == w.bytes


# ---- sparse attention ----------------------------------------------------------------------------------------------

def test_attention_plan_gathers_every_valid_index_once_duplicates_included():
    x = inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=3, num_pages=20), seed=4)
    idx = x["sparse_indices"]
    idx[0, 5:] = -1
    idx[1, :] = 7                                                # one row, 2048 times
    idx[2, 100:] = idx[2, :1948].clone()
    ckv_want = torch.zeros(20 * 64, dtype=torch.int32)
    for row in idx.tolist():
        for i in row:
            if i != -1:
                ckv_want[i] += 1
    p = probe.plan(ATTENTION, x)
    per_byte = coverage(p, "ckv_cache", nbytes(x["ckv_cache"])).view(-1, 1024)
    assert torch.equal(per_byte, ckv_want[:, None].expand(-1, 1024))
    assert torch.equal(coverage(p, "kpe_cache", nbytes(x["kpe_cache"])).view(-1, 128)[:, 0], ckv_want)
    assert p.write_bytes == 3 * 16 * (512 * 2 + 4)


def test_attention_plan_rejects_indices_outside_the_cache():
    x = inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=1, num_pages=20), seed=0)
    x["sparse_indices"][0, 0] = 20 * 64
    with pytest.raises(BadInputError, match="outside"):
        probe.plan(ATTENTION, x)


# ---- MoE -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("offset,experts", [(0, [0, 1]), (32, [0, 1, 2, 3, 4, 5]), (64, [])])
def test_moe_plan_reads_the_weights_of_the_routed_local_experts(offset, experts):
    from sdk.peers.glue import route  # the peers' own routing, written apart from the reference's

    x = moe_inputs(routed_logits(4), offset=offset)
    routed, _ = route(x["routing_logits"], x["routing_bias"], x["routed_scaling_factor"])
    local = sorted({e - offset for e in routed.flatten().tolist() if 0 <= e - offset < 32})
    assert local == experts
    p = probe.plan(MOE, x)
    for name in ("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale"):
        seg = next(s for s in p.reads if s.tensor == name)
        one = nbytes(x[name][0])
        assert seg.offsets.tolist() == [e * one for e in experts] and seg.lengths.tolist() == [one] * len(experts)
    assert p.write_bytes == 4 * 7168 * 2


# ---- the piece list ------------------------------------------------------------------------------------------------

def decoded(pieces: torch.Tensor) -> tuple[list[int], list[int]]:
    """Decode as the kernel does: 16-byte chunks (words >> 2) and single words (words & 3)."""
    return (pieces & ((1 << 48) - 1)).tolist(), (pieces >> 48).tolist()


def test_pieces_cover_each_range_exactly_with_kernel_sized_aligned_pieces():
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, 1 << 14, (300,), generator=gen) * 4 + (1 << 40)
    lengths = torch.randint(0, 3000, (300,), generator=gen) * 4
    lengths[:3] = torch.tensor([4, 12, 8192])
    pieces = probe.encode_pieces(*probe.split_ranges(starts, lengths))
    lo = int(starts.min())
    want = torch.zeros(int((starts + lengths).max()) - lo + 1, dtype=torch.int32)
    for s, n in zip(starts.tolist(), lengths.tolist()):
        want[s - lo:s - lo + n] += 1
    got = torch.zeros_like(want)
    for addr, words in zip(*decoded(pieces)):
        chunks, rest = words >> 2, words & 3
        assert words * 4 <= probe.PIECE_BYTES
        assert not (chunks and rest), "a piece is either 16-byte chunks or < 4 words"
        if chunks:
            assert addr % 16 == 0
        got[addr - lo:addr - lo + words * 4] += 1
    assert torch.equal(got, want)


def test_pieces_reject_ranges_off_word_boundaries():
    with pytest.raises(BadInputError, match="4-byte"):
        probe.split_ranges(torch.tensor([2]), torch.tensor([8]))


def test_bound_is_the_larger_of_probe_and_compute_time():
    work = Work(bytes=10, flops=int(2e12), matrix="fp8")
    ceilings = Ceilings(4e12, fp8_flops_per_s=1e15, bf16_flops_per_s=None)
    assert probe.bound_ms(1.0, work, ceilings) == pytest.approx(2.0)
    assert probe.bound_ms(3.0, work, ceilings) == 3.0
    assert probe.bound_ms(0.5, Work(10, int(1e15), "bf16"), ceilings) == 0.5  # no bf16 rate measured


# ---- the kernel: compiles here, runs on the GPU --------------------------------------------------------------------

def test_probe_kernel_compiles_for_sm90a_with_16_byte_loads(tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        pytest.skip("nvcc not found: cannot compile-check the probe kernel here")
    obj = tmp_path / "probe_stream.o"
    proc = subprocess.run([nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", "-c",
                           str(ROOT / "sdk" / "bench" / "probe_stream.cu"), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 bytes spill stores" in proc.stderr
    print("\n" + "\n".join(line for line in proc.stderr.splitlines() if "registers" in line))
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:  # optional here (the SASS check needs nvdisasm too)
        sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, timeout=120).stdout
        assert sass.count("LDG.E.128") >= 8, "the inner loop should issue 8 16-byte loads per lane"


def word_sum(p: probe.Plan, x: dict) -> int:
    """The sum of all 32-bit words the plan reads, mod 2**32: what the kernel's checksum must come to."""
    total = 0
    for seg in p.reads:
        flat = x[seg.tensor].reshape(-1).view(torch.uint8)
        for off, n in zip(seg.offsets.tolist(), seg.lengths.tolist()):
            total += int(flat[off:off + n].view(torch.int32).to(torch.int64).sum())
    return total % (1 << 32)


def contiguous_plan(buffer: torch.Tensor) -> probe.Plan:
    return probe.Plan("copy", (probe.Segments("buffer", torch.tensor([0]), torch.tensor([nbytes(buffer)])),), 0)


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", [
    (INDEXER, lambda: indexer_case(seed=3, batch_size=3, max_num_pages=40, num_pages=200)),
    (ATTENTION, lambda: inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=4, num_pages=200),
                                           seed=5)),
])
def test_probe_reads_every_planned_byte_and_writes_the_outputs(name, make):
    x = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in make().items()}
    ready = probe.prepare(name, x)
    ready.launch()
    torch.cuda.synchronize()
    assert int(ready.sink.to(torch.int64).sum()) % (1 << 32) == word_sum(ready.plan, x)
    marks = ready.dst.view(torch.int32).view(-1, 4)[:, 0].cpu()
    assert torch.equal(marks, torch.arange(marks.numel(), dtype=torch.int32))
    result = probe.run_probe(name, x, warmup=3, iters=10)
    print(f"\n{name}: {result['probe_ms'] * 1e3:.2f} us for {result['read_bytes']:,} B read, "
          f"{result['write_bytes']:,} B written, {result['pieces']} pieces, {result['blocks']} CTAs")
    assert result["probe_ms"] > 0 and result["timing_method"].startswith("cupti")


@pytest.mark.gpu
def test_probe_streams_at_copy_bandwidth():
    from sdk.bench.timing import time_call

    ceiling = floors.measure_ceilings("cuda", copy_bytes=1 << 30, matmul_size=2048, reps=5).hbm_bytes_per_s
    for size in (16 << 20, 64 << 20, 1 << 30):
        buffer = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
        ready = probe.prepare_plan(contiguous_plan(buffer), {"buffer": buffer})
        ready.launch()
        torch.cuda.synchronize()
        assert int(ready.sink.to(torch.int64).sum()) % (1 << 32) == word_sum(ready.plan, {"buffer": buffer})
        probe_bw = size / (time_call(ready.launch, "cuda", warmup=3, iters=20).median_ms * 1e-3)
        half = buffer[: size // 2]
        other = torch.empty_like(half)
        copy_bw = size / (time_call(lambda: other.copy_(half), "cuda", warmup=3, iters=20).median_ms * 1e-3)
        print(f"\n{size >> 20} MiB: probe {probe_bw / 1e12:.2f} TB/s, same-size copy {copy_bw / 1e12:.2f} TB/s, "
              f"1 GiB copy ceiling {ceiling / 1e12:.2f} TB/s")
        assert probe_bw >= 0.8 * copy_bw, "the probe must stream at >= 80% of a copy moving as many bytes"
        if size >= 64 << 20:
            assert probe_bw >= 0.8 * ceiling
