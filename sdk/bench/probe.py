"""A measured bound per workload: one launch of an SDK-own kernel that only moves the bytes the workload must move.

`plan(definition, inputs)` says, from the concrete inputs, which byte ranges of which input tensors a kernel has to
read and how many output bytes it has to write (the same accounting as `floors.work`: MoE reads the weights and
block scales of the local experts that receive a token, plus all activations; the indexer reads, for each row longer
than top-k, the K-cache bytes of its first `seq_len` tokens through its block table and its query and weights (a
shorter row selects every token it has, so it reads only its block-table entries); sparse attention gathers the ckv
and kpe rows of every non-padding index). `run_probe` streams exactly those ranges once (16-byte loads, a persistent
grid over all SMs, no arithmetic beyond a checksum that keeps the loads alive) while writing the output bytes, and
times that single launch by its CUPTI span: `probe_ms`. `bound_ms` is max(probe_ms, FLOPs / measured matrix rate).

Two kernel paths read the same bytes. When the plan's ranges, once those that touch are joined, are at most
MAX_RANGES ("ranges"), they ride in the launch's parameters and the first data load waits on nothing; otherwise
(gathered rows: "pieces") the kernel reads a device table of pieces first. `run_probe` says which path ran.
Each path has several kernels (VARIANTS on the ranges path, PIECE_VARIANTS on the pieces path; probe_stream.cu
says how each reads), chosen by `variant=`; "auto", or a kernel of the other path, is that path's default
(DEFAULT_VARIANT, DEFAULT_PIECE_VARIANT). The bench times every kernel of BOUND_VARIANTS or BOUND_PIECE_VARIANTS
per trial and keeps the fastest (`prepare_candidates`). On the pieces path the table is sorted by piece size
class (`class_sorted`): the kernels that pack several small pieces into one warp step find a step's pieces from
its index and a few class boundaries in the parameters (`piece_params`), with no second table.

probe_ms is a bound a real kernel cannot beat by streaming alone; its only extra traffic is the description of the
bytes (the piece list, 8 bytes per piece of up to 2 KB, and its class boundaries, or the range parameters;
`descriptor_bytes`) and one checksum word per warp.
"""
from __future__ import annotations

import hashlib
import statistics
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
MAX_RANGES = 96             # ranges in the kernel's parameters (kMaxRanges): 8 * (4 + 4 * 96) = 3104 B, under 4 KB;
                            # enough for any MoE plan (at most 16 runs of experts in each of 4 weight tensors + 4)
RANGE_HEADER = 4            # words before the per-range arrays: ranges, loose pieces, chunks, reserved
PATHS = ("auto", "ranges", "pieces")
VARIANTS = ("ranges", "lean", "wide", "hint", "bulk")  # the ranges-path kernels, in probe_stream.cu's order
# "ranges" is the one measured on the H200 (2026-12-01: correct on every plan test; 2.15 TB/s at 16 MiB, 77% of a
# same-size copy). The others are candidates for tests/test_probe.py::test_probe_variants_against_copy to rank.
DEFAULT_VARIANT = "ranges"
FALLBACK_VARIANT = "ranges"  # where "auto" cannot run DEFAULT_VARIANT
# The bench times each of these on a ranges-path plan and takes the faster as the bound (the fastest known way to
# read those bytes): on the H200 (2026-12-01, test_probe_variants_against_copy) "hint" led at 16 and 64 MiB (80% and
# 84% of a same-size copy against 77% and 76%) and "ranges" at 1 GiB (103% against 83%).
BOUND_VARIANTS = ("ranges", "hint")
# The pieces-path kernels, in probe_stream.cu's order (kPieceVariants), and the job size each one's class
# boundaries are computed for (0: one warp per piece, no jobs). "pieces" reads a table in any order, one warp per
# piece (the first pieces kernel); "classed" (and "classed_hint", its loads with the L2::256B hint) packs 2 KB of
# one size class into each warp job: 16 pieces of 128 B or 2 of 1 KB as well as one of 2 KB; "pieces_bulk" moves
# 16 KB jobs by TMA bulk copies into shared memory (sm_90, templates/common), so that its bytes in flight are not
# bounded by registers. All read the one class-sorted table; the bench keeps the fastest per trial.
PIECE_VARIANTS = ("pieces", "classed", "classed_hint", "pieces_bulk")
PIECE_JOB_BYTES = (0, 2048, 2048, 16 << 10)
DEFAULT_PIECE_VARIANT = "pieces"  # runs everywhere (no sm_90 feature, any table order)
# Measured on the H200 (session 4, test_pieces_variants_against_copy; % of a same-size copy): attention N=8 (19 MB)
# pieces 86, classed 87, classed_hint 91, pieces_bulk 74; indexer pages (24 MB) 90 / 86 / 94 / 80; attention N=1
# (2.4 MB) 119 / 118 / 116 / 64. pieces_bulk is never the fastest, so the bench leaves it out.
BOUND_PIECE_VARIANTS = ("pieces", "classed", "classed_hint")
CLASSES = 8                 # piece size classes: class k holds pieces of 2^(k-1) < chunks <= 2^k 16-byte chunks
MAX_JOB_SHIFT = 7           # at most 2^7 = 128 pieces in a job (4 per lane)
TABLE_WORDS = 2 + 3 * CLASSES + 1  # PieceTable: pointer, n, job_end[8], first[9], shift[8]
HERE = Path(__file__).parent
KERNEL_SOURCES = ("probe_stream.cu", "probe_binding.cpp")
# The bulk variant includes the shared Hopper helpers from a source checkout's templates/common; where that folder
# is absent (an installed package) the kernel file builds without it and the bulk variant is not available.
COMMON = HERE.parent.parent / "templates" / "common"
COMMON_HEADER = "sm90_ptx.cuh"


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
    used = (lens + page - 1) // page                         # pages of each row (their block-table entries)
    scored = floors.indexer_scored_rows(lens)
    paged = torch.where(scored, used, 0)                     # pages whose K bytes are read
    rows = torch.repeat_interleave(torch.arange(batch), paged)
    slot = torch.arange(int(paged.sum())) - torch.repeat_interleave(torch.cumsum(paged, 0) - paged, paged)
    ids = table.to("cpu", torch.long)[rows, slot]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= pages):
        raise BadInputError(f"probe: block_table names pages outside [0, {pages})")
    tokens = (lens[rows] - slot * page).clamp(max=page)      # tokens used in each of those pages
    values = Segments("k_index_cache_fp8", ids * page_bytes, tokens * dim)
    scales = Segments("k_index_cache_fp8", ids * page_bytes + page * dim, tokens * 4)
    nonempty = used > 0
    table_rows = Segments("block_table", torch.arange(batch)[nonempty] * width * table.element_size(),
                          used[nonempty] * table.element_size())
    per_row = (_row_segments(inputs, name, scored) for name in ("q_index_fp8", "weights"))
    reads = (values, scales, table_rows, *per_row, _whole("seq_lens", inputs["seq_lens"]))
    return Plan(INDEXER, reads, batch * floors.INDEXER_TOPK * 4,
                {"pages_read": int(paged.sum()), "tokens_scored": int(lens[scored].sum())})


def _row_segments(inputs: dict, name: str, rows: torch.Tensor) -> Segments:
    """The leading-dimension rows `rows` (a bool mask) of input `name`, one segment each."""
    t = inputs[name]
    row_bytes = floors.row_nbytes(t)
    picked = torch.arange(t.shape[0])[rows.cpu()]
    return Segments(name, picked * row_bytes, torch.full_like(picked, row_bytes))


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


def piece_classes(sizes: torch.Tensor) -> torch.Tensor:
    """Each piece's size class: k for 2^(k-1) < 16-byte chunks <= 2^k (a head or tail of < 16 bytes, no chunk,
    is class 0 with the one-chunk pieces)."""
    chunks = sizes.to(torch.long) // 16
    return (chunks[:, None] > (1 << torch.arange(CLASSES - 1))).sum(1)


def class_sorted(pieces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoded pieces -> the same pieces sorted by size class (stable) and the number in each class."""
    classes = piece_classes((pieces >> ADDRESS_BITS) * WORD)
    order = torch.sort(classes, stable=True).indices
    return pieces[order], torch.bincount(classes, minlength=CLASSES)


def job_shifts(job_bytes: int) -> list[int]:
    """log2 of the pieces in one job of each class: as many as fill `job_bytes` at the class's largest piece, at
    most 2^MAX_JOB_SHIFT (one job per piece without jobs, job_bytes 0)."""
    if job_bytes == 0:
        return [0] * CLASSES
    top = (job_bytes // 16).bit_length() - 1                 # log2 of the job's 16-byte chunks
    return [min(MAX_JOB_SHIFT, top - k) for k in range(CLASSES)]


def piece_params(counts: torch.Tensor, job_bytes: int) -> torch.Tensor:
    """Class counts -> the int64 words of the kernel's `PieceTable` parameters: [0 (the table's address, set at the
    launch), pieces, job_end[k] (jobs of classes 0..k), first[k] (class k's first piece; first[CLASSES] = pieces),
    shift[k] (a job of class k is 2^shift[k] consecutive pieces, its class's last one perhaps fewer)]."""
    shifts = torch.tensor(job_shifts(job_bytes), dtype=torch.long)
    counts = counts.to(torch.long)
    jobs = (counts + (1 << shifts) - 1) >> shifts
    first = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return torch.cat([torch.tensor([0, int(counts.sum())]), torch.cumsum(jobs, 0), first, shifts])


# ---- the few-ranges path: ranges in the kernel's parameters -------------------------------------------------------

def absolute_ranges(p: Plan, bases: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every read of the plan as (address, length), from each tensor's base address (its data pointer)."""
    if not p.reads:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return (torch.cat([s.offsets.to(torch.long) + bases[s.tensor] for s in p.reads]),
            torch.cat([s.lengths.to(torch.long) for s in p.reads]))


def merge_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """In address order, a range that starts exactly where the one before it ends joins it (within a tensor, or
    across tensors that touch). Overlapping ranges stay apart: the plan reads those bytes once per range (a row
    gathered twice is read twice), and so do both kernels and the checksum. Same bytes, same multiplicity."""
    keep = lengths > 0
    starts, order = torch.sort(starts[keep].to(torch.long), stable=True)
    lengths = lengths[keep].to(torch.long)[order]
    if not starts.numel():
        return starts, lengths
    joins = torch.zeros_like(starts, dtype=torch.bool)
    joins[1:] = starts[1:] == starts[:-1] + lengths[:-1]
    group = torch.cumsum(~joins, 0) - 1
    merged = torch.zeros(int(group[-1]) + 1, dtype=torch.long).index_add_(0, group, lengths)
    return starts[~joins], merged


def pack_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Merged ranges -> the int64 words of the kernel's `Ranges` parameters: [ranges, loose pieces, chunks, 0],
    then per range its chunk-count prefix sum (`end`) and `origin` (body address - 16 * its first chunk, so chunk
    c of the joint chunk space is at origin + 16c), then the loose pieces (heads and tails < 16 B, piece-encoded).
    The bodies are the table path's 16-byte-aligned bodies, kept whole."""
    if starts.numel() > MAX_RANGES:
        raise BadInputError(f"probe: {starts.numel()} ranges do not fit the kernel's {MAX_RANGES}")
    pieces, sizes = split_ranges(starts, lengths, piece=1 << ADDRESS_BITS)  # one body piece per range
    body = sizes >= 16                                                      # heads and tails are < 16 bytes
    chunks = sizes[body] // 16
    end = torch.cumsum(chunks, 0)
    words = torch.zeros(RANGE_HEADER + 4 * MAX_RANGES, dtype=torch.long)
    loose = encode_pieces(pieces[~body], sizes[~body])
    words[:3] = torch.tensor([int(body.sum()), loose.numel(), int(end[-1]) if end.numel() else 0])
    words[RANGE_HEADER:RANGE_HEADER + end.numel()] = end
    origin = pieces[body] - 16 * (end - chunks)
    words[RANGE_HEADER + MAX_RANGES:RANGE_HEADER + MAX_RANGES + origin.numel()] = origin
    words[RANGE_HEADER + 2 * MAX_RANGES:RANGE_HEADER + 2 * MAX_RANGES + loose.numel()] = loose
    return words


def choose_variant(path: str, variant: str = "auto", runnable: tuple[str, ...] = VARIANTS + PIECE_VARIANTS) -> str:
    """The kernel that runs on `path` ("ranges" or "pieces"): the asked variant where it is one of that path's
    kernels, else ("auto", or a kernel of the other path) the path's default: DEFAULT_VARIANT (FALLBACK_VARIANT
    where that one cannot run) or DEFAULT_PIECE_VARIANT; `runnable`: the kernels this build and device can run."""
    if variant != "auto" and variant not in VARIANTS + PIECE_VARIANTS:
        raise BadInputError(f"probe: variant must be auto or one of {', '.join(VARIANTS + PIECE_VARIANTS)}, "
                            f"got {variant!r}")
    if path == "pieces" and variant not in PIECE_VARIANTS:
        variant = DEFAULT_PIECE_VARIANT
    elif path != "pieces" and variant not in VARIANTS:
        variant = DEFAULT_VARIANT if DEFAULT_VARIANT in runnable else FALLBACK_VARIANT
    if variant not in runnable:
        raise BadInputError(f"probe: variant {variant!r} cannot run here (it needs sm_90 and {COMMON_HEADER} from "
                            f"templates/common); runnable: {', '.join(runnable)}")
    return variant


def choose_path(n_ranges: int, path: str = "auto") -> str:
    """"ranges" when the merged ranges fit the kernel's parameters, else "pieces"; a forced path is checked."""
    if path not in PATHS:
        raise BadInputError(f"probe: path must be one of {', '.join(PATHS)}, got {path!r}")
    if path == "ranges" and n_ranges > MAX_RANGES:
        raise BadInputError(f"probe: {n_ranges} ranges do not fit the kernel's {MAX_RANGES}; use the pieces path")
    if path == "auto":
        return "ranges" if n_ranges <= MAX_RANGES else "pieces"
    return path


# ---- the kernel ---------------------------------------------------------------------------------------------------

def _arch_flags(device: torch.device) -> list[str]:
    major, minor = torch.cuda.get_device_capability(device)
    suffix = "a" if major in (9, 10) else ""  # sm_90a on the H200, as every SDK kernel is built
    return [f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}"]


_EXTENSIONS: dict[str, Any] = {}


def extension(device: torch.device | str = "cuda"):
    """The JIT-built probe kernel (torch extension), cached by source and flags under $FIB_SDK_CACHE."""
    device = torch.device(device)
    header = COMMON / COMMON_HEADER
    flags = ["-O3", "-std=c++17", "-lineinfo", *_arch_flags(device), *([f"-I{COMMON}"] if header.is_file() else [])]
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in [HERE / name for name in KERNEL_SOURCES] + ([header] if header.is_file() else []):
        digest.update(path.read_bytes())
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
    path: str                                # "ranges" (in the parameters) or "pieces" (a device table)
    variant: str                             # the kernel that ran: one of VARIANTS or PIECE_VARIANTS
    ranges: int                              # the plan's ranges once touching ones are joined
    pieces: int                              # entries of the piece table (0 on the ranges path)
    blocks: int
    descriptor_bytes: int
    sink_bytes: int
    dst: torch.Tensor = field(repr=False)    # the written bytes (16-byte chunk i starts with the word i)
    sink: torch.Tensor = field(repr=False)   # one checksum word per warp: their sum is the sum of all words read

    def info(self) -> dict:
        """What the launch moves and how, for results rows."""
        return {"read_bytes": self.plan.read_bytes, "write_bytes": self.plan.write_bytes, "path": self.path,
                "variant": self.variant, "ranges": self.ranges, "pieces": self.pieces, "blocks": self.blocks,
                "descriptor_bytes": self.descriptor_bytes, "sink_bytes": self.sink_bytes}


def prepare(definition_name: str, inputs: dict, path: str = "auto", variant: str = "auto") -> Probe:
    """Plan, range parameters or piece list, output and checksum buffers, all built outside any timed region."""
    return prepare_plan(plan(definition_name, inputs), inputs, path, variant)


def prepare_candidates(definition_name: str, inputs: dict) -> list[Probe]:
    """The launches the bound is the fastest of: one per runnable kernel of the plan's path in BOUND_VARIANTS
    (ranges) or BOUND_PIECE_VARIANTS (pieces), the path's default first. All read and write the same bytes."""
    p = plan(definition_name, inputs)
    first = prepare_plan(p, inputs)
    ext = extension(first.device)
    if first.path == "ranges":
        bound, runnable = BOUND_VARIANTS, runnable_variants(ext)
    else:
        bound, runnable = BOUND_PIECE_VARIANTS, runnable_piece_variants(ext)
    return [first, *(prepare_plan(p, inputs, first.path, v) for v in bound if v != first.variant and v in runnable)]


def runnable_variants(ext) -> tuple[str, ...]:
    """The ranges-path variants this build can run on the current device (the extension says 0 threads if not)."""
    return tuple(name for i, name in enumerate(VARIANTS) if ext.variant_threads(i) > 0)


def runnable_piece_variants(ext) -> tuple[str, ...]:
    """The pieces-path kernels this build can run on the current device."""
    return tuple(name for i, name in enumerate(PIECE_VARIANTS) if ext.piece_variant_threads(i) > 0)


def prepare_plan(p: Plan, inputs: dict, path: str = "auto", variant: str = "auto") -> Probe:
    devices = {inputs[s.tensor].device for s in p.reads}
    if len(devices) != 1 or (device := devices.pop()).type != "cuda":
        raise BadInputError(f"probe: needs the inputs on one CUDA device, got {sorted(map(str, devices))}")
    starts, lengths = merge_ranges(*absolute_ranges(p, {name: inputs[name].data_ptr() for name in inputs
                                                        if isinstance(inputs[name], torch.Tensor)}))
    path = choose_path(starts.numel(), path)
    with torch.cuda.device(device):
        ext = extension(device)
        if ext.piece_bytes() != PIECE_BYTES or ext.max_ranges() != MAX_RANGES or \
                ext.ranges_bytes() != 8 * (RANGE_HEADER + 4 * MAX_RANGES) or \
                tuple(ext.variant_name(i) for i in range(ext.variants())) != VARIANTS or \
                ext.piece_table_bytes() != 8 * TABLE_WORDS or \
                tuple(ext.piece_variant_name(i) for i in range(ext.piece_variants())) != PIECE_VARIANTS or \
                tuple(ext.piece_job_bytes(i) for i in range(len(PIECE_VARIANTS))) != PIECE_JOB_BYTES:
            raise RuntimeError("probe_stream.cu and probe.py disagree on the piece size, the range or piece-table "
                               "parameters or the variants")
        kernel = choose_variant(path, variant, runnable_variants(ext) + runnable_piece_variants(ext))
        dst = torch.empty((p.write_bytes + 15) // 16 * 16, dtype=torch.uint8, device=device)
        if path == "ranges":
            params = pack_ranges(starts, lengths)                 # stays on the CPU: copied into every launch
            index = VARIANTS.index(kernel)
            blocks = int(ext.range_blocks(index, int(params[2]), int(params[1]), dst.numel()))
            threads = int(ext.variant_threads(index))
            n_pieces, descriptor = 0, params.numel() * 8
        else:
            table, counts = class_sorted(pieces_for(p, inputs))
            index = PIECE_VARIANTS.index(kernel)
            params = piece_params(counts, PIECE_JOB_BYTES[index])  # CPU words, copied into every launch
            table = table.to(device)
            blocks = int(ext.piece_blocks(index, params, dst.numel()))
            threads = int(ext.piece_variant_threads(index))
            if blocks <= 0:
                raise RuntimeError(f"probe: the {kernel} kernel refused its piece table")
            n_pieces, descriptor = table.numel(), table.numel() * 8 + params.numel() * 8
        sink = torch.zeros(blocks * threads // 32, dtype=torch.int32, device=device)

    def launch():
        if path == "ranges":
            ext.stream_ranges(index, params, dst, sink, blocks)
        else:
            ext.stream_pieces(index, table, params, dst, sink, blocks)

    return Probe(p, launch, device, path, kernel, starts.numel(), n_pieces, blocks, descriptor, sink.numel() * 4, dst,
                 sink)


def run_probe(definition_name: str, inputs: dict, *, warmup: int = 10, iters: int = 50,
              method: str = "cupti", path: str = "auto", variant: str = "auto") -> dict:
    """probe_ms (median CUPTI span of one launch, L2 flushed before each), what it moved and which path and
    kernel ran."""
    from .timing import time_call

    probe = prepare(definition_name, inputs, path, variant)
    timing = time_call(probe.launch, probe.device, warmup=warmup, iters=iters, method=method)
    moved = probe.plan.read_bytes + probe.plan.write_bytes
    return {"probe_ms": timing.median_ms, "timing_method": timing.method, **probe.info(),
            "bytes_per_s": moved / (timing.median_ms * 1e-3), "detail": probe.plan.detail}


def bound_ms(probe_ms: float, work: Work, ceilings: Ceilings) -> float:
    """max(probe_ms, FLOPs / measured matrix rate); without a measured rate for the work's matrix type, probe_ms."""
    rate = ceilings.fp8_flops_per_s if work.matrix == "fp8" else ceilings.bf16_flops_per_s
    compute_ms = work.flops / rate * 1e3 if rate else 0.0
    return max(probe_ms, compute_ms)


def timed_call_bounds(calls: list[dict], probe_ms: float, probed: Work, ceilings: Ceilings,
                      latency_key: str) -> dict | None:
    """The bound of the calls that were timed, not of the baseline's draws. A call's inputs decide its work (the
    MoE's routing, the indexer's and the attention's row lengths are drawn per call), and a trial's latency is the
    median over some 50 calls, while the probe ran on one draw per trial: three draws of a routing whose FLOPs vary
    2x between draws do not stand for 150 calls. Per timed call (one whose record has the judge's "work" and a
    latency), bound = max(the probe's time carried to the call's own bytes, its FLOPs / matrix rate). Per trial the
    median of those (as the latency takes the median of the spans); `bound_ms` the mean of the trials' (as
    latency_ms). None when no timed call carries its work.

    Carrying the probe: its span is a streaming part, the probed bytes at the measured copy bandwidth, and a fixed
    part, what is left (launch, first-load latency, a short grid's tail); only the streaming part scales with bytes.
    Scaling the whole span would multiply a fixed cost: a MoE draw at T=1 that routed no token to a local expert
    probes 40 KB in 2 us, and 2 us x (44 MB / 40 KB) is 2 ms for a call that streams one expert's 44 MB in 10 us.
    A probe at the copy rate has no fixed part and scales as before; a call with fewer bytes than the probed draws
    is never bound above the probe's own span."""
    rate = ceilings.fp8_flops_per_s if probed.matrix == "fp8" else ceilings.bf16_flops_per_s
    if probed.bytes <= 0:
        return None
    stream_ms = min(probe_ms, probed.bytes / ceilings.hbm_bytes_per_s * 1e3)
    fixed_ms = probe_ms - stream_ms

    def bound(work: dict) -> float:
        compute_ms = work["flops"] / rate * 1e3 if rate else 0.0
        return max(fixed_ms + stream_ms * work["bytes"] / probed.bytes, compute_ms)

    trials = floors.timed_call_values(calls, latency_key, bound)
    if not trials:
        return None
    medians = [statistics.median(v) for v in trials]
    return {"bound_ms": statistics.fmean(medians), "bound_trials_ms": medians, "bound_calls": sum(map(len, trials))}
