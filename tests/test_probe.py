"""The bandwidth probe: its byte plans against brute-force counts, its piece list, and (GPU) the kernel itself."""
import re
import shutil
import statistics
import subprocess
import textwrap
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

def indexer_case(seed=0, long_rows=(), **axes):
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer(**axes), seed=seed)
    x["seq_lens"][0] = 0                     # a row that reads nothing
    x["seq_lens"][1] = 64 * 2 + 5            # a partial third page, and short: every token is selected, unscored
    for row, length in long_rows:            # rows longer than top-k: these are scored, so their pages are read
        x["seq_lens"][row] = length
    return x


def test_indexer_plan_reads_exactly_the_tokens_inside_seq_len_of_the_rows_it_must_score():
    x = indexer_case(batch_size=4, max_num_pages=34, num_pages=150, long_rows=[(2, 2049), (3, 34 * 64 - 3)])
    x["seq_lens"][1] = 2048                  # exactly top-k: still nothing to score
    cache, table = x["k_index_cache_fp8"], x["block_table"]
    page_bytes = 64 * 132
    want = torch.zeros(nbytes(cache), dtype=torch.int32)
    want_table = torch.zeros(nbytes(table), dtype=torch.int32)
    for b, length in enumerate(x["seq_lens"].tolist()):
        for t in range(length if length > 2048 else 0):          # token by token, as the reference gathers
            page = int(table[b, t // 64])
            value = page * page_bytes + (t % 64) * 128
            scale = page * page_bytes + 64 * 128 + (t % 64) * 4
            want[value:value + 128] += 1
            want[scale:scale + 4] += 1
        for j in range((length + 63) // 64):                    # every row's output ids need its table entries
            start = (b * table.shape[1] + j) * 4
            want_table[start:start + 4] += 1
    p = probe.plan(INDEXER, x)
    assert torch.equal(coverage(p, "k_index_cache_fp8", nbytes(cache)), want)
    assert torch.equal(coverage(p, "block_table", nbytes(table)), want_table)
    q_row, w_row = 64 * 128, 64 * 4
    assert torch.equal(coverage(p, "q_index_fp8", 4 * q_row),
                       torch.tensor([0] * (2 * q_row) + [1] * (2 * q_row), dtype=torch.int32))
    assert p.read_bytes_by_tensor()["weights"] == 2 * w_row
    assert p.write_bytes == 4 * 2048 * 4
    assert p.detail["tokens_scored"] == 2049 + 34 * 64 - 3


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


# ---- the class-sorted table: what the classed and bulk kernels read, emulated --------------------------------------

MASK = (1 << probe.ADDRESS_BITS) - 1


def table_fields(params: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """probe.piece_params' words as the kernel's PieceTable: n, job_end[8], first[9], shift[8]."""
    c = probe.CLASSES
    assert params.numel() == probe.TABLE_WORDS and int(params[0]) == 0
    return int(params[1]), params[2:2 + c], params[2 + c:3 + 2 * c], params[3 + 2 * c:]


def jobs_of(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """job_at for every job, step for step: class k (jobs at or past job_end[c] for c < 7), first and end piece."""
    n, job_end, first, shift = table_fields(params)
    j = torch.arange(int(job_end[-1]))
    k = (j[:, None] >= job_end[None, :probe.CLASSES - 1]).sum(1)
    begin = torch.where(k > 0, job_end[(k - 1).clamp(min=0)], torch.zeros_like(k))
    start = first[k] + ((j - begin) << shift[k])
    return k, start, torch.minimum(start + (1 << shift[k]), first[k + 1])


def decode(table: torch.Tensor, p: torch.Tensor, valid: torch.Tensor):
    word = torch.where(valid, table[p.clamp(0, max(table.numel() - 1, 0))], torch.zeros_like(p))
    return word & MASK, (word >> 48) >> 2, (word >> 48) & 3


def classed_reads(table: torch.Tensor, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(address, length) of every load stream_classed issues: job j, slot s = lane + 32i (128 slots, 2 KB) holds
    chunk s % 2^k of piece first + s / 2^k, or that piece's words (< 16 B, class 0) at chunk 0."""
    k, start, end = jobs_of(params)
    s = torch.arange(32 * 4)
    piece = start[:, None] + (s[None, :] >> k[:, None])
    chunk = s[None, :] & ((1 << k[:, None]) - 1)
    address, chunks, rest = decode(table, piece, piece < end[:, None])
    body = chunk < chunks
    words = ~body & (chunk == 0) & (rest > 0)
    return (torch.cat([(address + 16 * chunk)[body], address[words]]),
            torch.cat([torch.full((int(body.sum()),), 16), 4 * rest[words]]))


def bulk_jobs(table: torch.Tensor, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """stream_pieces_bulk's jobs: lane L's pieces first + L + 32q (q < 4); per job the piece of each (lane, q) slot
    (-1: none) and the job's bytes in its shared-memory stage (16-byte chunks only)."""
    _, start, end = jobs_of(params)
    slot = torch.arange(32)[:, None] + 32 * torch.arange(4)[None, :]
    piece = start[:, None, None] + slot[None]
    valid = piece < end[:, None, None]
    _, chunks, _ = decode(table, piece, valid)
    return torch.where(valid, piece, -1), (16 * chunks).flatten(1).sum(1), valid


def gathered_case(seed: int, *shapes: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Random rows of fake caches (rows, row bytes, rows gathered; duplicates included), one cache after another,
    plus a whole tensor with an unaligned end: the plan's (address, length) ranges, its base and its span."""
    gen = torch.Generator().manual_seed(seed)
    lo, at, starts, lengths = 1 << 40, 1 << 40, [], []
    for rows, row, n in shapes:
        ids = torch.randint(0, rows, (n,), generator=gen)
        starts.append(at + ids * row)
        lengths.append(torch.full_like(ids, row))
        at += rows * row
    starts.append(torch.tensor([at + 4]))                              # a head, 10 bodies and a tail: 12 pieces
    lengths.append(torch.tensor([20_000 - 8]))
    return torch.cat(starts), torch.cat(lengths), lo, at + 20_000 - lo


GATHERED = [
    ("attention N=8", (4096, 1024, 16384), (4096, 128, 16384)),
    ("attention N=1", (4096, 1024, 2048), (4096, 128, 2048)),
    ("indexer pages", (3000, 8448, 300)),                              # values and scales of a page touch
    ("odd sizes", (500, 48, 700), (300, 1040, 300), (200, 16, 900), (50, 12, 40)),
]


@pytest.mark.parametrize("case", GATHERED, ids=[c[0] for c in GATHERED])
def test_class_sorted_table_keeps_every_piece_in_classes_of_its_size(case):
    starts, lengths, _, _ = gathered_case(0, *case[1:])
    pieces = probe.encode_pieces(*probe.split_ranges(starts, lengths))
    table, counts = probe.class_sorted(pieces)
    assert torch.equal(torch.sort(table).values, torch.sort(pieces).values)   # the same pieces, reordered
    assert int(counts.sum()) == table.numel() and counts.numel() == probe.CLASSES
    chunks = (table >> 48) >> 2
    bounds = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)]).tolist()
    for k in range(probe.CLASSES):                                      # class k: 2^(k-1) < chunks <= 2^k
        got = chunks[bounds[k]:bounds[k + 1]]
        assert bool((got <= 1 << k).all()) and bool((got > (1 << k) // 2).all() if k else True), k
    assert bool(((table >> 48)[chunks == 0] < 4).all()), "no chunk: a head or tail of < 16 bytes, class 0"
    for job_bytes in probe.PIECE_JOB_BYTES:
        n, job_end, first, shift = table_fields(probe.piece_params(counts, job_bytes))
        assert n == table.numel() and first.tolist() == bounds
        assert torch.equal(job_end, torch.cumsum((counts + (1 << shift) - 1) >> shift, 0))
        if job_bytes:  # a job is at most 128 pieces, and its pieces fit the job at their class's largest size
            assert bool((shift <= probe.MAX_JOB_SHIFT).all())
            assert bool(((16 << (shift + torch.arange(probe.CLASSES))) <= job_bytes).all())


@pytest.mark.parametrize("case", GATHERED, ids=[c[0] for c in GATHERED])
def test_classed_kernel_reads_every_planned_byte_once_per_mention(case):
    starts, lengths, lo, size = gathered_case(1, *case[1:])
    table, counts = probe.class_sorted(probe.encode_pieces(*probe.split_ranges(starts, lengths)))
    job_bytes = probe.PIECE_JOB_BYTES[probe.PIECE_VARIANTS.index("classed")]
    params = probe.piece_params(counts, job_bytes)
    assert job_bytes == 32 * 4 * 16 and table_fields(params)[3].tolist() == [7 - k for k in range(8)]  # slot = s >> k
    addresses, sizes = classed_reads(table, params)
    assert bool((addresses[sizes == 16] % 16 == 0).all())
    assert torch.equal(byte_counts(addresses, sizes, lo, size), byte_counts(starts, lengths, lo, size))
    if case[0] != "odd sizes":  # rows of 2^k chunks fill their jobs (16 rows of 128 B, 2 of 1 KB): 2 KB a job
        jobs = int(table_fields(params)[1][-1])
        assert jobs * job_bytes <= int(lengths.sum()) * 1.01 + probe.CLASSES * job_bytes


@pytest.mark.parametrize("case", GATHERED, ids=[c[0] for c in GATHERED])
def test_bulk_jobs_cover_every_piece_once_within_a_stage(case):
    starts, lengths, lo, size = gathered_case(2, *case[1:])
    table, counts = probe.class_sorted(probe.encode_pieces(*probe.split_ranges(starts, lengths)))
    job_bytes = probe.PIECE_JOB_BYTES[probe.PIECE_VARIANTS.index("pieces_bulk")]
    piece, stage_bytes, valid = bulk_jobs(table, probe.piece_params(counts, job_bytes))
    taken = piece[valid]
    assert torch.equal(torch.sort(taken).values, torch.arange(table.numel())), "each piece in exactly one job"
    assert int(stage_bytes.max()) <= job_bytes and bool((stage_bytes % 16 == 0).all())
    address, chunks, rest = decode(table, taken, torch.ones_like(taken, dtype=torch.bool))
    assert bool((address[chunks > 0] % 16 == 0).all()), "bulk copies: 16-byte aligned whole chunks"
    reads = byte_counts(address, 16 * chunks + 4 * rest, lo, size)
    assert torch.equal(reads, byte_counts(starts, lengths, lo, size))


def test_piece_table_is_a_few_percent_of_the_attention_plans_bytes():
    starts, lengths, _, _ = gathered_case(3, *GATHERED[0][1:])
    table, counts = probe.class_sorted(probe.encode_pieces(*probe.split_ranges(starts, lengths)))
    descriptor = 8 * table.numel() + 8 * probe.piece_params(counts, 2048).numel()
    assert table.numel() == 32768 + 12 and descriptor < 0.02 * int(lengths.sum())


def test_bound_is_the_larger_of_probe_and_compute_time():
    work = Work(bytes=10, flops=int(2e12), matrix="fp8")
    ceilings = Ceilings(4e12, fp8_flops_per_s=1e15, bf16_flops_per_s=None)
    assert probe.bound_ms(1.0, work, ceilings) == pytest.approx(2.0)
    assert probe.bound_ms(3.0, work, ceilings) == 3.0
    assert probe.bound_ms(0.5, Work(10, int(1e15), "bf16"), ceilings) == 0.5  # no bf16 rate measured


# ---- the few-ranges path: merging, the threshold, the parameter words ---------------------------------------------

def byte_counts(starts, lengths, lo: int, size: int) -> torch.Tensor:
    """How many times each byte of [lo, lo + size) is named by the (address, length) ranges."""
    count = torch.zeros(size + 1, dtype=torch.int64)
    count.index_add_(0, torch.as_tensor(starts) - lo, torch.ones(len(starts), dtype=torch.int64))
    count.index_add_(0, torch.as_tensor(starts) + torch.as_tensor(lengths) - lo, -torch.ones(len(starts),
                                                                                           dtype=torch.int64))
    return torch.cumsum(count, 0)[:size]


def test_merge_joins_touching_ranges_and_keeps_overlapping_ones_apart():
    base = 1 << 40
    starts = torch.tensor([16, 0, 100, 150, 300, 300, 404, 500, 520]) + base
    lengths = torch.tensor([32, 16, 100, 100, 8, 8, 0, 20, 12])
    got = probe.merge_ranges(starts, lengths)
    # [0,16)+[16,48) touch; [100,200) and [150,250) overlap: both stay (bytes 150..199 are read twice), and so does
    # the duplicate [300,308); the empty range goes; [500,520)+[520,532) touch, unaligned head and tail included.
    assert (got[0] - base).tolist() == [0, 100, 150, 300, 300, 500]
    assert got[1].tolist() == [48, 100, 100, 8, 8, 32]


def test_merge_joins_ranges_of_other_tensors_that_touch():
    a = probe.Segments("a", torch.tensor([0, 64]), torch.tensor([64, 192]))       # all of a's 256 bytes
    b = probe.Segments("b", torch.tensor([0, 128]), torch.tensor([36, 16]))       # b starts where a ends
    p = probe.Plan("x", (b, a), 0)
    starts, lengths = probe.merge_ranges(*probe.absolute_ranges(p, {"a": 4096, "b": 4096 + 256}))
    assert starts.tolist() == [4096, 4096 + 256 + 128] and lengths.tolist() == [256 + 36, 16]


def test_merge_keeps_every_bytes_multiplicity_on_random_ranges():
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, 1 << 12, (400,), generator=gen) * 4 + (1 << 40)
    lengths = torch.randint(0, 64, (400,), generator=gen) * 4
    starts[200:300] = starts[100:200] + lengths[100:200]                          # a hundred touching pairs
    merged = probe.merge_ranges(starts, lengths)
    lo, size = 1 << 40, (1 << 14) + 4096
    assert torch.equal(byte_counts(*merged, lo, size), byte_counts(starts, lengths, lo, size))
    assert merged[0].numel() < 400 and int(merged[1].sum()) == int(lengths.sum())


def kernel_reads(words: torch.Tensor, lo: int, size: int) -> torch.Tensor:
    """Decode the parameter words as stream_ranges does: chunk c of range r (end[r-1] <= c < end[r]) at
    origin[r] + 16c, and each loose piece's words; returns how many times each byte of [lo, lo + size) is read."""
    n, n_loose, chunks = words[:3].tolist()
    k = probe.MAX_RANGES
    end = words[probe.RANGE_HEADER:probe.RANGE_HEADER + n]
    origin = words[probe.RANGE_HEADER + k:probe.RANGE_HEADER + k + n]
    loose = words[probe.RANGE_HEADER + 2 * k:probe.RANGE_HEADER + 2 * k + n_loose]
    c = torch.arange(chunks)
    addresses = origin[torch.searchsorted(end, c, right=True)] + 16 * c
    assert bool((addresses % 16 == 0).all())
    loose_words = loose >> 48
    assert bool(((loose_words > 0) & (loose_words < 4)).all()), "a loose piece is 1 to 3 words"
    return byte_counts(torch.cat([addresses, loose & ((1 << 48) - 1)]),
                       torch.cat([torch.full_like(addresses, 16), loose_words * 4]), lo, size)


def first_range(end: list[int], n: int, lo: int) -> int:
    """The kernel's binary search, step for step: how many ranges end at or before chunk lo."""
    r, step = 0, 128
    while step:
        if r + step <= n and end[r + step - 1] <= lo:
            r += step
        step //= 2
    return r


def test_packed_words_read_exactly_the_planned_bytes():
    gen = torch.Generator().manual_seed(2)
    lo = (1 << 40) + 4                                                            # unaligned on purpose
    starts = torch.randint(0, 1 << 14, (probe.MAX_RANGES,), generator=gen) * 4 + lo
    lengths = torch.randint(1, 700, (probe.MAX_RANGES,), generator=gen) * 4
    lengths[:4] = torch.tensor([4, 12, 16, 20])                                   # heads or tails alone
    merged = probe.merge_ranges(starts, lengths)
    words = probe.pack_ranges(*merged)
    assert words.dtype == torch.long and words.numel() * 8 == 8 * (4 + 4 * probe.MAX_RANGES) <= 4096
    size = (1 << 16) + 4096
    assert torch.equal(kernel_reads(words, lo, size), byte_counts(starts, lengths, lo, size))
    n, _, chunks = words[:3].tolist()
    end = words[probe.RANGE_HEADER:probe.RANGE_HEADER + n].tolist()
    assert end[-1] == chunks and all(a < b for a, b in zip([0] + end, end))
    for blocks in (1, 7, 132, 528):                                               # every CTA's first range
        for b in range(blocks):
            start, stop = chunks * b // blocks, chunks * (b + 1) // blocks
            if start < stop:
                r = first_range(end, n, start)
                assert (end[r - 1] if r else 0) <= start < end[r]


def test_pack_rejects_more_ranges_than_the_kernel_holds():
    starts = torch.arange(probe.MAX_RANGES + 1) * 64
    with pytest.raises(BadInputError, match="do not fit"):
        probe.pack_ranges(starts, torch.full_like(starts, 32))


def test_path_is_ranges_up_to_the_threshold_and_pieces_beyond():
    assert probe.choose_path(1) == probe.choose_path(probe.MAX_RANGES) == "ranges"
    assert probe.choose_path(probe.MAX_RANGES + 1) == "pieces"
    assert probe.choose_path(3, "pieces") == "pieces"
    with pytest.raises(BadInputError, match="do not fit"):
        probe.choose_path(probe.MAX_RANGES + 1, "ranges")
    with pytest.raises(BadInputError, match="path must be"):
        probe.choose_path(3, "fast")


def test_variant_is_the_asked_kernel_of_its_path_and_the_paths_default_otherwise():
    assert probe.DEFAULT_VARIANT in probe.VARIANTS and probe.FALLBACK_VARIANT in probe.VARIANTS
    assert probe.DEFAULT_PIECE_VARIANT in probe.PIECE_VARIANTS and not set(probe.VARIANTS) & set(probe.PIECE_VARIANTS)
    for v in probe.VARIANTS:
        assert probe.choose_variant("ranges", v) == v
        assert probe.choose_variant("pieces", v) == probe.DEFAULT_PIECE_VARIANT  # a ranges kernel on a gathered plan
    for v in probe.PIECE_VARIANTS:
        assert probe.choose_variant("pieces", v) == v
        assert probe.choose_variant("ranges", v) == probe.DEFAULT_VARIANT
    assert probe.choose_variant("ranges") == probe.DEFAULT_VARIANT
    assert probe.choose_variant("pieces") == probe.DEFAULT_PIECE_VARIANT
    with pytest.raises(BadInputError, match="cannot run here"):
        probe.choose_variant("pieces", "pieces_bulk", ("pieces", "classed"))
    # where the default cannot run (bulk: no sm_90 or no templates/common), "auto" falls back; asking for it fails
    others = tuple(v for v in probe.VARIANTS if v != "bulk")
    assert probe.choose_variant("ranges", "auto", others) in (probe.DEFAULT_VARIANT, probe.FALLBACK_VARIANT)
    with pytest.raises(BadInputError, match="cannot run here"):
        probe.choose_variant("ranges", "bulk", others)
    with pytest.raises(BadInputError, match="variant must be"):
        probe.choose_variant("ranges", "fastest")


def test_variants_are_listed_in_the_kernel_files_order():
    """probe.VARIANTS and PIECE_VARIANTS index the kernel file's tables (prepare_plan checks them against the built
    extension too), and each pieces kernel's job size is the one probe.py computes its class boundaries for."""
    source = (ROOT / "sdk" / "bench" / "probe_stream.cu").read_text()
    table = source[source.index("kVariants[] = {"):]
    assert tuple(re.findall(r'\{"(\w+)", (?:FIB_PROBE_BULK \? )?stream_', table[:table.index("};")])) == probe.VARIANTS
    table = source[source.index("kPieceVariants[] = {"):]
    rows = re.findall(r'\{"(\w+)", (?:FIB_PROBE_BULK \? )?stream_\w+(?:<\w+>)?(?: : nullptr)?, (\w+(?: \* 32)?), ([\w *]+),',
                      table[:table.index("};")])
    assert tuple(name for name, _, _ in rows) == probe.PIECE_VARIANTS
    sizes = {"0": 0, "kJobSlots * 16": 2048, "kBulkJobBytes": 16 << 10}
    assert tuple(sizes[job] for _, _, job in rows) == probe.PIECE_JOB_BYTES
    assert re.search(r"kJobSlots = 32 \* kChunksPerLane;", source) and "kChunksPerLane = kPieceBytes / (32 * 16)" in source
    assert "kBulkJobBytes = 16 << 10;" in source and f"kClasses = {probe.CLASSES};" in source


def fake_bases(x: dict) -> dict[str, int]:
    """Addresses as the caching allocator could give them: back to back, 512-byte aligned (so whole tensors touch)."""
    out, at = {}, 1 << 32
    for name, t in x.items():
        if isinstance(t, torch.Tensor):
            out[name], at = at, at + (nbytes(t) + 511) // 512 * 512
    return out


def alternate_experts_logits() -> torch.Tensor:
    """One token per even local expert (offset 0): 16 runs of one expert in each weight tensor."""
    logits = torch.full((16, 256), -8.0)
    for t in range(16):
        logits[t, 2 * t] = 6.0
    return logits


@pytest.mark.parametrize("name,make,path", [
    (INDEXER, lambda: indexer_case(seed=1, batch_size=8, max_num_pages=40, num_pages=400,
                                   long_rows=[(r, 2049 + 70 * r) for r in range(2, 8)]), "pieces"),
    (INDEXER, lambda: indexer_case(seed=1, long_rows=[(2, 40 * 64)]), "ranges"),   # a full page's values and
    # scales touch: one range per page
    (ATTENTION, lambda: inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=2, num_pages=40),
                                           seed=2), "pieces"),
    (MOE, lambda: moe_inputs(routed_logits(3), offset=32), "ranges"),
    (MOE, lambda: moe_inputs(alternate_experts_logits(), offset=0), "ranges"),   # the most ranges a MoE plan has
])
def test_both_paths_describe_the_plans_bytes(name, make, path):
    x = make()
    p = probe.plan(name, x)
    starts, lengths = probe.merge_ranges(*probe.absolute_ranges(p, fake_bases(x)))
    assert int(lengths.sum()) == p.read_bytes == floors.work(name, x).bytes - p.write_bytes
    assert probe.choose_path(starts.numel()) == path
    if path == "ranges":
        words = probe.pack_ranges(starts, lengths)
        n, n_loose, chunks = words[:3].tolist()
        loose = words[probe.RANGE_HEADER + 2 * probe.MAX_RANGES:][:n_loose]
        assert chunks * 16 + int((loose >> 48).sum()) * 4 == p.read_bytes


def official_routing(source: str, logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The official reference's own routing block (from its '# 2)' comment to its '# 3)' comment), run alone."""
    lines = source.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("# 2)"))
    last = next(i for i, line in enumerate(lines) if line.strip().startswith("# 3)"))
    scope = {"torch": torch, "routing_logits": logits, "routing_bias": bias, "routed_scaling_factor": 2.5,
             "T": logits.shape[0], "E_global": 256, "TOP_K": 8, "N_GROUP": 8, "TOPK_GROUP": 4}
    exec(compile(textwrap.dedent("\n".join(lines[first:last])), "<official routing>", "exec"), scope)
    return scope["topk_idx"]


def test_moe_plan_counts_the_local_experts_the_official_routing_picks(shared_contest):
    """Small T included: a T=1 call routes 8 experts of 256, so a rank of 32 often gets none of them (then the plan
    reads only the activations, a few KB, and the probe's span is launch-bound)."""
    import json

    source = json.loads((shared_contest / "definitions" / f"{MOE}.json").read_text())["reference"]
    gen = torch.Generator().manual_seed(3)
    for T in (1, 1, 1, 1, 2, 7, 32):
        logits = torch.randn(T, 256, generator=gen) * 1.5 + torch.randn(1, 256, generator=gen) * 0.75
        bias = (torch.randn(256, generator=gen) * 0.3).to(torch.bfloat16)     # large enough to change picks
        picked = official_routing(source, logits, bias)
        for offset in range(0, 256, 32):
            x = moe_inputs(logits, offset)
            x["routing_bias"] = bias
            want = sorted({e - offset for e in picked.flatten().tolist() if 0 <= e - offset < 32})
            seg = next(s for s in probe.plan(MOE, x).reads if s.tensor == "gemm1_weights")
            assert (seg.offsets // nbytes(x["gemm1_weights"][0])).tolist() == want, (T, offset)


def test_probe_bandwidth_is_put_against_a_same_size_copy_timed_in_the_same_trials():
    from sdk.bench.baselines import probe_rates

    info = {"read_bytes": 19_000_000, "write_bytes": 131_584}
    got = probe_rates(info, probe_ms=0.008, copy_ms=0.0065)
    moved = 19_131_584
    assert got["gb_per_s"] == pytest.approx(moved / 0.008 / 1e6) and got["copy_ms"] == 0.0065
    assert got["copy_gb_per_s"] == pytest.approx(moved / 0.0065 / 1e6)
    assert got["pct_of_copy"] == pytest.approx(got["gb_per_s"] / got["copy_gb_per_s"] * 100) == pytest.approx(81.25)
    assert probe_rates(info, 0.008, None) == {"gb_per_s": pytest.approx(moved / 0.008 / 1e6)}  # no copy timed
    assert probe_rates({}, None, 0.0065) == {"gb_per_s": None}                                  # no probe timed


def test_results_rows_carry_the_probes_mean_bytes_over_its_trials():
    from sdk.bench.baselines import probe_summary

    trials = [{"read_bytes": 44_059_872, "write_bytes": 14336, "descriptor_bytes": 3104, "path": "ranges",
               "variant": "bulk", "ranges": 2, "pieces": 0},
              {"read_bytes": 8928, "write_bytes": 14336, "descriptor_bytes": 3104, "path": "ranges",
               "variant": "bulk", "ranges": 1, "pieces": 0}]
    got = probe_summary(trials)
    assert got["read_bytes"] == (44_059_872 + 8928) / 2 and got["read_bytes_trials"] == [44_059_872, 8928]
    assert got["path"] == "ranges" and got["variant"] == "bulk" and got["ranges_trials"] == [2, 1]
    mixed = probe_summary([{**trials[0], "path": "pieces", "variant": "pieces"}, trials[1]])
    assert mixed["path"] == "pieces+ranges" and mixed["variant"] == "bulk+pieces"
    pieces = probe_summary([{**trials[0], "path": "pieces", "variant": "classed"},
                            {**trials[1], "path": "pieces", "variant": "pieces_bulk"}])
    assert pieces["path"] == "pieces" and pieces["variant"] == "classed+pieces_bulk"
    timed = probe_summary([{**trials[0], "variant": "hint", "variant_ms": {"ranges": 0.011, "hint": 0.010}},
                           {**trials[1], "variant": "ranges", "variant_ms": {"ranges": 0.002, "hint": 0.003}}])
    assert timed["variant"] == "hint+ranges" and timed["variant_ms_trials"][0] == {"ranges": 0.011, "hint": 0.010}


# ---- the kernel: compiles here, runs on the GPU --------------------------------------------------------------------

def test_probe_kernel_compiles_for_sm90a_with_16_byte_loads(tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        pytest.skip("nvcc not found: cannot compile-check the probe kernel here")
    obj = tmp_path / "probe_stream.o"
    proc = subprocess.run([nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v",
                           f"-I{probe.COMMON}", "-c", str(ROOT / "sdk" / "bench" / "probe_stream.cu"), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = len(probe.VARIANTS) + len(probe.PIECE_VARIANTS)
    assert proc.stderr.count("0 bytes spill stores") == kernels, proc.stderr[-3000:]
    print("\n" + "\n".join(line for line in proc.stderr.splitlines() if "registers" in line))
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:  # optional here (the SASS check needs nvdisasm too)
        sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, timeout=120).stdout
        kernels = {name: body for name, body in (part.split("\n", 1) for part in sass.split("Function : ")[1:])}

        def body(*marks: str) -> str:
            return next(b for name, b in kernels.items() if all(m in name for m in marks))

        def loads16(sass_body: str) -> list[str]:
            return re.findall(r"LDG\.E[\w.]*\.128[\w.]*", sass_body)
        # Each lane keeps 8 (wide: 16) 16-byte loads in flight; the lean kernels have two loops (a share inside one
        # range, any share). Template arguments <Threads, Unroll, MinBlocks, Hint, Lean> as the names mangle them.
        assert len(loads16(body("13stream_pieces"))) >= 8                # (mangled: not stream_pieces_bulk)
        for hint in (0, 1):                                             # classed: 2 jobs of 4 loads a lane
            got = loads16(body(f"14stream_classedILb{hint}E"))
            assert len(got) >= 8 and all(".NA." in op and "LTC256B" in op for op in got) == bool(hint), got[:2]
        pieces_bulk = body("18stream_pieces_bulk")
        assert "UBLKCP" in pieces_bulk and "SYNCS.PHASECHK" in pieces_bulk and not loads16(pieces_bulk)
        ranges_kernels = {"ranges": ("ILi256ELi8ELi4ELb0ELb0E", 8), "lean": ("ILi256ELi8ELi4ELb0ELb1E", 16),
                          "wide": ("ILi512ELi16ELi1ELb0ELb1E", 32), "hint": ("ILi256ELi8ELi4ELb1ELb1E", 16)}
        for variant, (args, n) in ranges_kernels.items():
            got = loads16(body("stream_ranges" + args))
            assert len(got) >= n, f"{variant}: {len(got)} 16-byte loads"
            # hint: no L1 allocation, 256-byte L2 fetches
            assert all(".NA." in op and "LTC256B" in op for op in got) == (variant == "hint"), (variant, got[:2])
        bulk = body("stream_bulk")
        assert "UBLKCP" in bulk and "SYNCS.PHASECHK" in bulk and not loads16(bulk), "bulk: TMA copies, mbarrier waits"


def word_sum(p: probe.Plan, x: dict) -> int:
    """The sum of all 32-bit words the plan reads, mod 2**32: what the kernel's checksum must come to (each word as
    often as the plan names it; on the CPU, every segment's words gathered at once)."""
    total = 0
    for seg in p.reads:
        flat = x[seg.tensor].reshape(-1).view(torch.uint8).cpu()
        words = flat[:flat.numel() // 4 * 4].view(torch.int32)
        n = seg.lengths.to(torch.long) // 4
        inside = torch.arange(int(n.sum())) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
        total += int(words[torch.repeat_interleave(seg.offsets.to(torch.long) // 4, n) + inside].to(torch.int64).sum())
    return total % (1 << 32)


def contiguous_plan(buffer: torch.Tensor) -> probe.Plan:
    return probe.Plan("copy", (probe.Segments("buffer", torch.tensor([0]), torch.tensor([nbytes(buffer)])),), 0)


def check_launch(ready: probe.Probe, x: dict, want: int | None = None) -> None:
    """One launch: the checksum words add up to the planned words (each as often as the plan names it; `want`:
    word_sum, when already known), and every output chunk carries its mark."""
    ready.sink.fill_(0x5A5A5A5A)  # a warp that stores no checksum leaves a wrong sum
    ready.launch()
    torch.cuda.synchronize()
    assert int(ready.sink.to(torch.int64).sum()) % (1 << 32) == (word_sum(ready.plan, x) if want is None else want)
    marks = ready.dst.view(torch.int32).view(-1, 4)[:, 0].cpu()
    assert torch.equal(marks, torch.arange(marks.numel(), dtype=torch.int32))


def small_moe():
    from tests.helpers import small

    return inputs.make_inputs(definitions.load(MOE), small(MOE, "small-moe", seq_len=4), seed=6, device="cuda")


PLAN_CASES = [
    (INDEXER, lambda: indexer_case(seed=3, batch_size=3, max_num_pages=40, num_pages=200), "ranges"),  # 39 ranges
    (INDEXER, lambda: indexer_case(seed=3, batch_size=3, max_num_pages=40, num_pages=200), "pieces"),
    (INDEXER, lambda: indexer_case(seed=1, batch_size=8, max_num_pages=40, num_pages=400), "auto"),    # 108: pieces
    (ATTENTION, lambda: inputs.make_inputs(definitions.load(ATTENTION), small_attention(num_tokens=4, num_pages=200),
                                           seed=5), "auto"),
    (MOE, small_moe, "ranges"),
    (MOE, small_moe, "pieces"),
]


# The bound's candidates: on a ranges-path plan the default kernel and every other BOUND_VARIANTS kernel, on a
# pieces-path plan every BOUND_PIECE_VARIANTS kernel (the default first); each reads every planned byte.
@pytest.mark.gpu
@pytest.mark.parametrize("name,make", [(MOE, small_moe), (ATTENTION, PLAN_CASES[3][1])])
def test_bound_candidates_read_the_same_bytes(name, make):
    x = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in make().items()}
    candidates = probe.prepare_candidates(name, x)
    first = candidates[0]
    if first.path == "ranges":
        assert [c.variant for c in candidates] == [probe.DEFAULT_VARIANT] + [
            v for v in probe.BOUND_VARIANTS if v != probe.DEFAULT_VARIANT]
    else:
        assert [c.variant for c in candidates] == [probe.DEFAULT_PIECE_VARIANT] + [
            v for v in probe.BOUND_PIECE_VARIANTS if v != probe.DEFAULT_PIECE_VARIANT]
    for ready in candidates:
        assert ready.plan.read_bytes == first.plan.read_bytes and ready.plan.write_bytes == first.plan.write_bytes
        check_launch(ready, x)


# Every ranges-path variant on the plans that take that path, every pieces-path kernel on the others (and a ranges
# variant there, which falls back to the default pieces kernel).
@pytest.mark.gpu
@pytest.mark.parametrize("name,make,path,variant", [(*case, v) for case in PLAN_CASES for v in (
    probe.VARIANTS if case[2] == "ranges" else ("bulk", *probe.PIECE_VARIANTS))])
def test_probe_reads_every_planned_byte_and_writes_the_outputs(name, make, path, variant):
    x = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in make().items()}
    ready = probe.prepare(name, x, path, variant)
    assert ready.path == path if path != "auto" else ready.path in ("ranges", "pieces")
    kernels = probe.VARIANTS if ready.path == "ranges" else probe.PIECE_VARIANTS
    assert ready.variant == (variant if variant in kernels else probe.DEFAULT_PIECE_VARIANT)
    check_launch(ready, x)
    result = probe.run_probe(name, x, warmup=3, iters=10, path=path, variant=variant)
    print(f"\n{name} [{result['path']}/{result['variant']}]: {result['probe_ms'] * 1e3:.2f} us for "
          f"{result['read_bytes']:,} B read, {result['write_bytes']:,} B written, {result['ranges']} ranges, "
          f"{result['pieces']} pieces, {result['blocks']} CTAs")
    assert result["probe_ms"] > 0 and result["timing_method"].startswith("cupti")
    assert result["path"] == ready.path and result["variant"] == ready.variant
    assert result["read_bytes"] == ready.plan.read_bytes


@pytest.mark.gpu
@pytest.mark.parametrize("path,variant", [("pieces", "auto"), *(("pieces", v) for v in probe.PIECE_VARIANTS),
                                          *(("ranges", v) for v in probe.VARIANTS)])
def test_both_paths_read_touching_overlapping_and_unaligned_ranges_once_per_mention(path, variant):
    """Two tensors that touch (views of one buffer), ranges that touch across them, overlap, repeat, and start
    or end off 16 bytes; bodies long enough to spread over every CTA."""
    gen = torch.Generator().manual_seed(7)
    buffer = torch.randint(-(1 << 31), 1 << 31, (4 << 20,), dtype=torch.int32, generator=gen).cuda()
    x = {"a": buffer[: 1 << 20], "b": buffer[1 << 20:]}                          # b starts where a ends
    offsets = torch.randint(0, (3 << 20) - (1 << 16), (40,), generator=gen) * 4
    lengths = torch.randint(1, 1 << 16, (40,), generator=gen) * 4
    a = probe.Segments("a", torch.tensor([(1 << 22) - 4100, 0, 0, 36]), torch.tensor([4100, 20, 20, 1 << 20]))
    b = probe.Segments("b", torch.cat([torch.tensor([0, 12]), offsets]), torch.cat([torch.tensor([12, 999_992]),
                                                                                   lengths]))
    p = probe.Plan("mixed", (a, b), 1000)
    ready = probe.prepare_plan(p, x, path, variant)
    assert ready.path == path and ready.variant == probe.choose_variant(path, variant) and ready.ranges <= 44
    check_launch(ready, x)


@pytest.mark.gpu
def test_probe_streams_at_copy_bandwidth():
    """The bound is the fastest of the ranges-path candidates (what the bench keeps per trial): it must stream at
    >= 80% of a same-size copy, and from 64 MiB at >= 80% of the 1 GiB copy ceiling."""
    from sdk.bench.timing import time_call

    ceiling = floors.measure_ceilings("cuda", copy_bytes=1 << 30, matmul_size=2048, reps=5).hbm_bytes_per_s
    for size in (16 << 20, 64 << 20, 1 << 30):
        buffer = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
        x = {"buffer": buffer}
        rates = {}
        for variant in probe.BOUND_VARIANTS:
            ready = probe.prepare_plan(contiguous_plan(buffer), x, "ranges", variant)
            assert ready.path == "ranges" and ready.variant == variant  # one range: the parameters
            check_launch(ready, x)
            rates[variant] = size / (time_call(ready.launch, "cuda", warmup=3, iters=20).median_ms * 1e-3)
        best = max(rates, key=rates.get)
        half = buffer[: size // 2]
        other = torch.empty_like(half)
        copy_bw = size / (time_call(lambda: other.copy_(half), "cuda", warmup=3, iters=20).median_ms * 1e-3)
        shown = ", ".join(f"{v} {r / 1e12:.2f}" for v, r in rates.items())
        print(f"\n{size >> 20} MiB: probe TB/s {shown} (best {best}: {rates[best] / copy_bw:.0%} of the copy), "
              f"same-size copy {copy_bw / 1e12:.2f} TB/s, 1 GiB copy ceiling {ceiling / 1e12:.2f} TB/s")
        assert rates[best] >= 0.8 * copy_bw, "the probe must stream at >= 80% of a copy moving as many bytes"
        if size >= 64 << 20:
            assert rates[best] >= 0.8 * ceiling


class CleanFlush:
    """Stands in for the timer's flush buffer: zeroes it as the timer does, then reads it, so that the lines the
    zeroing left dirty in L2 are written back before the timed call rather than during it (a diagnostic: is a
    16 MiB read slow because of the flush's write-backs, which a copy of 8 MiB pays on half as many reads?)."""

    def __init__(self, buffer: torch.Tensor):
        self.buffer = buffer

    def zero_(self):
        self.buffer.zero_()
        self.buffer.view(torch.int32).amax()


@pytest.mark.gpu
def test_probe_variants_against_copy():
    """Every ranges-path variant reading one contiguous buffer of 16 MiB, 64 MiB and 1 GiB: its checksum (asserted),
    its bandwidth next to a copy moving as many bytes (half read, half written) and a torch kernel that reads the
    same bytes (a sum), timed as the bench times (CUPTI span, L2 flushed by zeroing before each call), then again
    after a flush whose dirty lines are written back first. Printed, to choose DEFAULT_VARIANT from; the empty
    launch (a plan of no bytes) is each variant's fixed cost."""
    from sdk.bench import timing

    flush = timing.l2_flush_buffer(torch.device("cuda"))
    empty = torch.zeros(16, dtype=torch.uint8, device="cuda")
    variants = probe.runnable_variants(probe.extension("cuda"))
    assert set(variants) == set(probe.VARIANTS), "every variant runs on the GPU this test is for (sm_90 or later)"
    nothing = probe.Plan("empty", (probe.Segments("buffer", torch.tensor([0]), torch.tensor([0])),), 0)
    calls = {v: (probe.prepare_plan(nothing, {"buffer": empty}, "ranges", v).launch, 20) for v in variants}
    spans = timing.time_many(calls, "cuda", warmup=3)
    print("\nempty launch: " + ", ".join(f"{v} {spans[v].median_ms * 1e3:.2f} us" for v in variants))
    for size in (16 << 20, 64 << 20, 1 << 30):
        buffer = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
        half, words = buffer[: size // 2], buffer.view(torch.int32)
        other = torch.empty_like(half)
        calls = {"copy": (lambda: other.copy_(half), 20), "sum": (lambda: words.sum(), 20)}
        for v in variants:
            ready = probe.prepare_plan(contiguous_plan(buffer), {"buffer": buffer}, "ranges", v)
            assert ready.variant == v
            check_launch(ready, {"buffer": buffer})
            calls[v] = (ready.launch, 20)
        bench = timing.time_many(calls, "cuda", warmup=3)
        clean = timing._time_cupti(calls, CleanFlush(flush))  # the timer's own session, with the other flush
        rate = {key: (size / (bench[key].median_ms * 1e-3) / 1e12, size / (statistics.median(clean[key]) * 1e-3) / 1e12)
                for key in calls}
        names = {"copy": f"copy {size >> 21} MiB -> {size >> 21} MiB", "sum": "torch sum (reads the same bytes)"}
        print(f"{size >> 20} MiB, TB/s (bench flush | clean flush):")
        for key in (*variants, "copy", "sum"):
            mark = " (default)" if key == probe.DEFAULT_VARIANT else ""
            print(f"  {names.get(key, key) + mark:34s} {rate[key][0]:5.2f} | {rate[key][1]:5.2f}   "
                  f"{rate[key][0] / rate['copy'][0]:5.0%} of the copy")


def random_words(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(-(1 << 31), 1 << 31, (n,), dtype=torch.int32, device="cuda", generator=gen)


def gathered_plan(seed: int, *caches: tuple[int, int, int], whole: tuple[int, ...] = (), write_bytes: int = 0):
    """A pieces-path plan shaped like a workload's: per cache (rows, row bytes, rows gathered) a random gather of
    its rows (duplicates included), then whole small tensors (bytes each); the inputs it reads, on the GPU."""
    gen = torch.Generator().manual_seed(seed)
    x, reads = {}, []
    for i, (rows, row, n) in enumerate(caches):
        x[f"cache{i}"] = random_words(rows * row // 4, seed + i)
        ids = torch.randint(0, rows, (n,), generator=gen)
        reads.append(probe.Segments(f"cache{i}", ids * row, torch.full_like(ids, row)))
    for i, size in enumerate(whole):
        x[f"whole{i}"] = random_words(size // 4, seed + 10 + i)
        reads.append(probe.Segments(f"whole{i}", torch.tensor([0]), torch.tensor([size])))
    return probe.Plan("gathered", tuple(reads), write_bytes), x


def indexer_pages_plan(seed: int, pages: int, used: int):
    """The indexer's K-cache plan: `used` distinct random pages of 64 tokens x 132 bytes (values, then scales)."""
    gen = torch.Generator().manual_seed(seed)
    cache = random_words(pages * 8448 // 4, seed)
    ids = torch.randperm(pages, generator=gen)[:used]
    reads = (probe.Segments("cache", ids * 8448, torch.full_like(ids, 8192)),
             probe.Segments("cache", ids * 8448 + 8192, torch.full_like(ids, 256)))
    return probe.Plan("indexer pages", reads, 8 * 2048 * 4), {"cache": cache}


# Attention: N tokens gather 2048 rows each of the ckv cache (1024 B) and of the kpe cache (128 B) of 8462 pages of
# 64 rows (554 + 69 MB, as the contest's workloads), and read q_nope, q_pe and the indices whole; they write
# N x 16 heads x (512 bf16 + an fp32). Indexer: ~24 MB of whole pages of a 169 MB cache.
CACHE_ROWS = 8462 * 64
PIECE_PLANS = [
    ("attention N=8", lambda: gathered_plan(8, (CACHE_ROWS, 1024, 16384), (CACHE_ROWS, 128, 16384),
                                            whole=(8 * 16 * 1024, 8 * 16 * 128, 8 * 2048 * 4),
                                            write_bytes=8 * 16 * 1028)),
    ("attention N=1", lambda: gathered_plan(1, (CACHE_ROWS, 1024, 2048), (CACHE_ROWS, 128, 2048),
                                            whole=(16 * 1024, 16 * 128, 2048 * 4), write_bytes=16 * 1028)),
    ("indexer 24 MB", lambda: indexer_pages_plan(2, 20000, 2840)),
]


@pytest.mark.gpu
def test_pieces_variants_against_copy():
    """Every pieces-path kernel on plans shaped like the sparse-attention (N=8: ~19 MB; N=1: 2.4 MB) and indexer
    (~24 MB) plans: its checksum and marks (asserted), its bandwidth next to a device copy moving as many bytes (half
    read, half written), timed as the bench times both (time_many: CUPTI span, L2 flushed before each call). The
    bench keeps the fastest kernel per trial: on plans of 16 MB and more that one must reach 80% of the copy."""
    from sdk.bench import timing

    variants = probe.runnable_piece_variants(probe.extension("cuda"))
    assert set(variants) == set(probe.PIECE_VARIANTS), "every pieces kernel runs on the GPU this test is for (sm_90)"
    short = []
    for name, make in PIECE_PLANS:
        p, x = make()
        moved = p.read_bytes + p.write_bytes
        src = torch.empty((moved + 1) // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        calls, want = {"copy": (lambda: dst.copy_(src), 30)}, word_sum(p, x)
        for v in variants:
            ready = probe.prepare_plan(p, x, "pieces", v)
            assert ready.path == "pieces" and ready.variant == v
            assert ready.descriptor_bytes < 0.02 * p.read_bytes
            check_launch(ready, x, want)
            ready.dst.zero_()
            check_launch(ready, x, want)  # twice: nothing of the first launch is left for the second to reuse
            calls[v] = (ready.launch, 30)
        spans = timing.time_many(calls, "cuda", warmup=5)
        rate = {key: moved / (spans[key].median_ms * 1e-3) / 1e12 for key in calls}
        best = max(variants, key=rate.get)
        print(f"\n{name}: {p.read_bytes / 1e6:.1f} MB read, {ready.pieces} pieces; TB/s (% of a same-size copy):")
        for key in (*variants, "copy"):
            print(f"  {key + (' (best)' if key == best else ''):20s} {rate[key]:5.2f}  {spans[key].median_ms * 1e3:7.2f} us"
                  f"  {rate[key] / rate['copy']:5.0%}")
        if moved >= 16e6 and rate[best] < 0.8 * rate["copy"]:
            short.append(f"{name}: best {best} {rate[best] / rate['copy']:.0%} of the copy")
    assert not short, "the fastest pieces kernel must reach 80% of a same-size copy on plans of 16 MB and more: " + \
        "; ".join(short)
