"""A measured bound per workload: one launch of an SDK-own kernel that only moves the bytes the workload must move.

`plan(definition, inputs)` says, from the concrete inputs, which byte ranges of which input tensors a kernel has to
read and how many output bytes it has to write (the same accounting as `floors.work`: MoE reads the weights and
block scales of the local experts that receive a token, plus all activations; the indexer reads the K-cache bytes of
each row's first `seq_len` tokens through its block table; sparse attention gathers the ckv and kpe rows of every
non-padding index). `run_probe` streams exactly those ranges once (16-byte loads, a persistent grid over all SMs,
no arithmetic beyond a checksum that keeps the loads alive) while writing the output bytes, and times that single
launch by its CUPTI span: `probe_ms`. `bound_ms` is max(probe_ms, FLOPs / measured matrix rate).

probe_ms is a bound a real kernel cannot beat by streaming alone; its only extra traffic is the piece list itself
(8 bytes per piece of up to 2 KB, reported as `descriptor_bytes`) and one checksum word per warp.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import BadInputError
from . import floors
from .floors import ATTENTION, INDEXER, MOE, Ceilings, Work

PIECE_BYTES = 2048          # the kernel reads a piece as at most 4 16-byte loads per lane of a warp
WORD = 4                    # every range is whole 4-byte words (fp8 payloads come in 128-byte rows)
ADDRESS_BITS = 48
HERE = Path(__file__).parent
KERNEL_SOURCES = ("probe_stream.cu", "probe_binding.cpp")


@dataclass(frozen=True)
class Segments:
    """Byte ranges [offsets[i], offsets[i] + lengths[i]) of one input tensor, counted from its data pointer."""

    tensor: str
    offsets: torch.Tensor   # int64, on the CPU
    lengths: torch.Tensor   # int64, on the CPU

    @property
    def nbytes(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True)
class Plan:
    definition: str
    reads: tuple[Segments, ...]
    write_bytes: int
    detail: dict = field(default_factory=dict)

    @property
    def read_bytes(self) -> int:
        return sum(s.nbytes for s in self.reads)

    def read_bytes_by_tensor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.reads:
            out[s.tensor] = out.get(s.tensor, 0) + s.nbytes
        return out


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _whole(name: str, t: torch.Tensor) -> Segments:
    return Segments(name, torch.zeros(1, dtype=torch.long), torch.tensor([_nbytes(t)], dtype=torch.long))


def _contiguous(inputs: dict, *names: str) -> None:
    for name in names:
        if not inputs[name].is_contiguous():
            raise BadInputError(f"probe: input {name!r} must be contiguous (its byte ranges are computed from shapes)")


# ---- per definition: which bytes ----------------------------------------------------------------------------------

def moe_plan(inputs: dict) -> Plan:
    weights = ("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale")
    activations = ("hidden_states", "hidden_states_scale", "routing_logits", "routing_bias")
    _contiguous(inputs, *weights, *activations)
    # The routing is the floor model's, which is the reference's own (no second implementation to drift).
    per_expert = floors.moe_work(inputs).detail["tokens_per_local_expert"]
    active = torch.tensor([e for e, n in enumerate(per_expert) if n > 0], dtype=torch.long)
    reads = []
    for name in weights:
        slice_bytes = _nbytes(inputs[name][0])
        reads.append(Segments(name, active * slice_bytes, torch.full_like(active, slice_bytes)))
    reads += [_whole(name, inputs[name]) for name in activations]
    tokens, hidden = inputs["hidden_states"].shape
    return Plan(MOE, tuple(reads), tokens * hidden * 2, {"active_local_experts": active.tolist()})


def indexer_plan(inputs: dict) -> Plan:
    cache, table = inputs["k_index_cache_fp8"], inputs["block_table"]
    _contiguous(inputs, "k_index_cache_fp8", "block_table", "q_index_fp8", "weights", "seq_lens")
    pages, page, _, row = cache.shape                       # page layout: [page x 128 fp8][page x fp32 scale]
    dim = row - 4
    page_bytes = page * row * cache.element_size()
    batch, width = table.shape
    lens = inputs["seq_lens"].to("cpu", torch.long).clamp(0, width * page)
    used = (lens + page - 1) // page                         # pages each row reads
    rows = torch.repeat_interleave(torch.arange(batch), used)
    slot = torch.arange(int(used.sum())) - torch.repeat_interleave(torch.cumsum(used, 0) - used, used)
    ids = table.to("cpu", torch.long)[rows, slot]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= pages):
        raise BadInputError(f"probe: block_table names pages outside [0, {pages})")
    tokens = (lens[rows] - slot * page).clamp(max=page)      # tokens used in each of those pages
    values = Segments("k_index_cache_fp8", ids * page_bytes, tokens * dim)
    scales = Segments("k_index_cache_fp8", ids * page_bytes + page * dim, tokens * 4)
    nonempty = used > 0
    table_rows = Segments("block_table", torch.arange(batch)[nonempty] * width * table.element_size(),
                          used[nonempty] * table.element_size())
    reads = (values, scales, table_rows, *(_whole(n, inputs[n]) for n in ("q_index_fp8", "weights", "seq_lens")))
    return Plan(INDEXER, reads, batch * floors.INDEXER_TOPK * 4,
                {"pages_read": int(used.sum()), "tokens_scored": int(lens.sum())})


def attention_plan(inputs: dict) -> Plan:
    ckv, kpe, indices = inputs["ckv_cache"], inputs["kpe_cache"], inputs["sparse_indices"]
    _contiguous(inputs, "ckv_cache", "kpe_cache", "q_nope", "q_pe", "sparse_indices")
    ids = indices.to("cpu", torch.long).flatten()
    ids = ids[ids != -1]
    rows = ckv.shape[0] * ckv.shape[1]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= rows):
        raise BadInputError(f"probe: sparse_indices outside [0, {rows}) besides the -1 padding")
    ckv_row, kpe_row = ckv.shape[-1] * ckv.element_size(), kpe.shape[-1] * kpe.element_size()
    reads = (Segments("ckv_cache", ids * ckv_row, torch.full_like(ids, ckv_row)),
             Segments("kpe_cache", ids * kpe_row, torch.full_like(ids, kpe_row)),
             *(_whole(n, inputs[n]) for n in ("q_nope", "q_pe", "sparse_indices")))
    tokens, heads, dim = inputs["q_nope"].shape
    return Plan(ATTENTION, reads, tokens * heads * dim * 2 + tokens * heads * 4, {"gathered_rows": ids.numel()})


PLANS: dict[str, Callable[[dict], Plan]] = {MOE: moe_plan, INDEXER: indexer_plan, ATTENTION: attention_plan}


def plan(definition_name: str, inputs: dict) -> Plan:
    fn = PLANS.get(definition_name)
    if fn is None:
        raise BadInputError(f"no probe plan for definition {definition_name!r}; known: {', '.join(sorted(PLANS))}")
    return fn(inputs)


# ---- the piece list the kernel reads ------------------------------------------------------------------------------

def split_ranges(addresses: torch.Tensor, lengths: torch.Tensor, piece: int = PIECE_BYTES) -> tuple[torch.Tensor,
                                                                                                    torch.Tensor]:
    """Byte ranges -> pieces the kernel can stream: a head of < 16 bytes up to 16-byte alignment, 16-byte-multiple
    body pieces of at most `piece` bytes, and a tail of < 16 bytes. Same bytes, each exactly once."""
    addresses, lengths = addresses.to(torch.long), lengths.to(torch.long)
    keep = lengths > 0
    addresses, lengths = addresses[keep], lengths[keep]
    if bool(((addresses % WORD) != 0).any() | ((lengths % WORD) != 0).any()):
        raise BadInputError("probe: every range must start and end on a 4-byte boundary")
    head = torch.minimum((16 - addresses % 16) % 16, lengths)
    body = (lengths - head) // 16 * 16
    tail = lengths - head - body
    per = (body + piece - 1) // piece
    owner = torch.repeat_interleave(torch.arange(len(body)), per)
    k = torch.arange(int(per.sum())) - torch.repeat_interleave(torch.cumsum(per, 0) - per, per)
    body_start = addresses[owner] + head[owner] + k * piece
    body_len = torch.minimum(body[owner] - k * piece, torch.full_like(k, piece))
    starts = torch.cat([addresses[head > 0], body_start, (addresses + head + body)[tail > 0]])
    sizes = torch.cat([head[head > 0], body_len, tail[tail > 0]])
    return starts, sizes


def encode_pieces(starts: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """One int64 per piece: the address in bits 0..47, the length in 4-byte words above (what the kernel decodes)."""
    if starts.numel() and int(starts.max()) >= 1 << ADDRESS_BITS:
        raise BadInputError("probe: an address does not fit in 48 bits")
    if sizes.numel() and int(sizes.max()) > PIECE_BYTES:
        raise BadInputError(f"probe: a piece is longer than {PIECE_BYTES} bytes")
    return starts | ((sizes // WORD) << ADDRESS_BITS)


def pieces_for(p: Plan, inputs: dict) -> torch.Tensor:
    """The plan as absolute-address pieces of the given (device) tensors, int64 on the CPU."""
    starts, sizes = [], []
    for seg in p.reads:
        base = inputs[seg.tensor].data_ptr()
        s, n = split_ranges(seg.offsets + base, seg.lengths)
        starts.append(s)
        sizes.append(n)
    return encode_pieces(torch.cat(starts), torch.cat(sizes))


# ---- the kernel ---------------------------------------------------------------------------------------------------

def _arch_flags(device: torch.device) -> list[str]:
    major, minor = torch.cuda.get_device_capability(device)
    suffix = "a" if major in (9, 10) else ""  # sm_90a on the H200, as every SDK kernel is built
    return [f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}"]


_EXTENSIONS: dict[str, Any] = {}


def extension(device: torch.device | str = "cuda"):
    """The JIT-built probe kernel (torch extension), cached by source and flags under $FIB_SDK_CACHE."""
    device = torch.device(device)
    flags = ["-O3", "-std=c++17", "-lineinfo", *_arch_flags(device)]
    digest = hashlib.sha256(" ".join(flags).encode())
    for name in KERNEL_SOURCES:
        digest.update((HERE / name).read_bytes())
    tag = f"fib_sdk_probe_{digest.hexdigest()[:16]}"
    if tag not in _EXTENSIONS:
        from torch.utils.cpp_extension import load

        cache = Path(os.environ.get("FIB_SDK_CACHE", Path.home() / ".cache" / "fib-sdk")) / "jit" / tag
        cache.mkdir(parents=True, exist_ok=True)
        _EXTENSIONS[tag] = load(name=tag, sources=[str(HERE / n) for n in KERNEL_SOURCES], extra_cuda_cflags=flags,
                                extra_cflags=["-O3"], build_directory=str(cache), verbose=False)
    return _EXTENSIONS[tag]


@dataclass
class Probe:
    """A ready launch: `launch()` runs the kernel once; everything it touches was allocated beforehand."""

    plan: Plan
    launch: Callable[[], None]
    device: torch.device
    pieces: int
    blocks: int
    descriptor_bytes: int
    sink_bytes: int
    dst: torch.Tensor = field(repr=False)    # the written bytes (16-byte chunk i starts with the word i)
    sink: torch.Tensor = field(repr=False)   # one checksum word per warp: their sum is the sum of all words read


def prepare(definition_name: str, inputs: dict) -> Probe:
    """Plan, piece list, output and checksum buffers, all built outside any timed region."""
    return prepare_plan(plan(definition_name, inputs), inputs)


def prepare_plan(p: Plan, inputs: dict) -> Probe:
    devices = {inputs[s.tensor].device for s in p.reads}
    if len(devices) != 1 or (device := devices.pop()).type != "cuda":
        raise BadInputError(f"probe: needs the inputs on one CUDA device, got {sorted(map(str, devices))}")
    with torch.cuda.device(device):
        ext = extension(device)
        if ext.piece_bytes() != PIECE_BYTES:
            raise RuntimeError("probe_stream.cu and probe.py disagree on the piece size")
        pieces = pieces_for(p, inputs).to(device)
        dst = torch.empty((p.write_bytes + 15) // 16 * 16, dtype=torch.uint8, device=device)
        blocks = int(ext.blocks(pieces.numel(), dst.numel()))
        sink = torch.zeros(blocks * ext.threads_per_block() // 32, dtype=torch.int32, device=device)

    def launch():
        ext.stream(pieces, dst, sink, blocks)

    return Probe(p, launch, device, pieces.numel(), blocks, pieces.numel() * 8, sink.numel() * 4, dst, sink)


def run_probe(definition_name: str, inputs: dict, *, warmup: int = 10, iters: int = 50,
              method: str = "cupti") -> dict:
    """probe_ms (median CUPTI span of one launch, L2 flushed before each) and what it moved."""
    from .timing import time_call

    probe = prepare(definition_name, inputs)
    timing = time_call(probe.launch, probe.device, warmup=warmup, iters=iters, method=method)
    moved = probe.plan.read_bytes + probe.plan.write_bytes
    return {"probe_ms": timing.median_ms, "timing_method": timing.method, "read_bytes": probe.plan.read_bytes,
            "write_bytes": probe.plan.write_bytes, "descriptor_bytes": probe.descriptor_bytes,
            "sink_bytes": probe.sink_bytes, "pieces": probe.pieces, "blocks": probe.blocks,
            "bytes_per_s": moved / (timing.median_ms * 1e-3), "detail": probe.plan.detail}


def bound_ms(probe_ms: float, work: Work, ceilings: Ceilings) -> float:
    """max(probe_ms, FLOPs / measured matrix rate); without a measured rate for the work's matrix type, probe_ms."""
    rate = ceilings.fp8_flops_per_s if work.matrix == "fp8" else ceilings.bf16_flops_per_s
    compute_ms = work.flops / rate * 1e3 if rate else 0.0
    return max(probe_ms, compute_ms)
