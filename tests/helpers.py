"""Small workloads of the real definitions, so CPU tests run the full pipeline in seconds; calling a solution the
way the gate does (poisoned outputs), on the CPU fallback and, where a GPU is present, on the CUDA kernels."""
import functools
import importlib.util
from pathlib import Path

import pytest
import torch

from sdk import definitions, inputs, workloads
from sdk._fib import Workload

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"


def small(definition: str, uuid: str = "small", **axes) -> Workload:
    """A workload with the official input kinds of `definition` and the given (small) axis values; its blob paths
    point nowhere (synthetic/<uuid>.safetensors), so the seeded generators run even where FIB_DATASET_PATH holds
    the official blobs (of other shapes)."""
    specs = {name: spec.model_copy(update={"path": f"synthetic/{uuid}.safetensors"}) if spec.type == "safetensors"
             else spec for name, spec in workloads.load(definition)[0].inputs.items()}
    return Workload(uuid=uuid, axes=axes, inputs=specs)


def small_indexer(uuid="small-indexer", batch_size=3, max_num_pages=40, num_pages=200) -> Workload:
    return small(INDEXER, uuid, batch_size=batch_size, max_num_pages=max_num_pages, num_pages=num_pages)


def small_attention(uuid="small-attention", num_tokens=3, num_pages=80) -> Workload:
    return small(ATTENTION, uuid, num_tokens=num_tokens, num_pages=num_pages)


# The CPU fallback, and the CUDA kernels (`gpu` marker: skipped with conftest's printed reason where torch sees no GPU).
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def on_devices(cases, gpu_only=()) -> list:
    """(case, device) parameters: every case on each of DEVICES, those in `gpu_only` on the GPU alone."""
    return [pytest.param(case, device.values[0], id=f"{case}-{device.id}", marks=device.marks)
            for case in cases for device in DEVICES if case not in gpu_only or device.id == "cuda"]


def need(device: str) -> None:
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the kernels are only compile-checked here")


def call_poisoned(fn, definition: str, workload: Workload, x: dict) -> dict:
    """One call of a destination-passing solution on fresh outputs poisoned with NaN / INT_MIN (as the gate poisons
    them before every call, sdk.inputs.alloc_outputs); returns the outputs by name."""
    device = next(v.device for v in x.values() if isinstance(v, torch.Tensor))
    outs = inputs.alloc_outputs(definitions.load(definition), workload, device=device)
    assert fn(*x.values(), *outs.values()) is None   # destination-passing: results only in the buffers
    return outs


def assert_same_bits(first: dict, second: dict) -> None:
    for name, value in first.items():
        assert torch.equal(value, second[name]), f"{name}: a second call on the same inputs wrote other bits"


def with_token_rows(x: dict, choice: torch.Tensor, gen: torch.Generator) -> dict:
    """Indexer inputs whose every cached token (values and scale) is one of `choice.max() + 1` random token rows:
    `choice` [num_pages, 64] picks which, so all-zero `choice` ties every score."""
    page = x["k_index_cache_fp8"].shape[1]
    raw = x["k_index_cache_fp8"].view(torch.uint8).view(-1, page * 132).clone()
    pages = raw.shape[0]
    source = torch.randint(0, pages * page, (int(choice.max()) + 1,), generator=gen, device=raw.device)
    values = raw[:, : page * 128].reshape(pages * page, 128)[source]  # [V, 128] fp8 bytes
    scales = raw[:, page * 128:].reshape(pages * page, 4)[source]     # [V, 4] bytes of one fp32
    raw[:, : page * 128] = values[choice].view(pages, page * 128)
    raw[:, page * 128:] = scales[choice].view(pages, page * 4)
    return {**x, "k_index_cache_fp8": raw.view(torch.int8).view(x["k_index_cache_fp8"].shape)}


def indexer_terms(x: dict, row: int, n: int, k: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The global ids of row `row`'s first `n` tokens and their fp32 score terms w_h * relu(q_h . k) [n, 64]
    (`k`: the dequantised cache [pages * 64, 128], when the caller has it already)."""
    if k is None:
        k = definitions.reference_module(INDEXER).dequant_k_cache(x["k_index_cache_fp8"]).flatten(0, 1)
    pages = x["block_table"][row, : (n + 63) // 64].long()
    ids = (pages[:, None] * 64 + torch.arange(64, device=pages.device)).flatten()[:n]
    dots = torch.einsum("hd,nd->nh", x["q_index_fp8"][row].float(), k[ids])
    return ids, torch.relu(dots) * x["weights"][row].float()[None]


def cancelling_heads(x: dict, gen: torch.Generator, redraw: int = 1, weight: float = 16.0) -> dict:
    """Indexer inputs that need an accurate dot product: heads 32..63 repeat heads 0..31 with `redraw` of their 128
    q components redrawn and weigh -`weight` against +`weight`, so each score is a small difference of terms
    summing to ~4400 in magnitude; each row is then cut where its 2048th score is nearest zero, which takes the
    contest rule's relative term away (atol 0.01 alone decides). A kernel whose scores err by ~1e-5 of the terms
    (FP8 tensor-core accumulation) swaps boundary tokens over 0.01 apart; fp32 accumulation in any order errs
    by ~1.5e-7 and passes (tests/test_kernel_dsa_topk_indexer.py measures both)."""
    qb = x["q_index_fp8"].view(torch.uint8).clone()
    rows = qb.shape[0]
    qb[:, 32:] = qb[:, :32]
    pool = x["q_index_fp8"].view(torch.uint8).flatten()   # redraw from its own bytes: valid e4m3, never NaN
    picks = torch.stack([torch.randperm(128, generator=gen, device=gen.device)[:redraw] for _ in range(rows * 32)])
    fresh = pool[torch.randint(0, pool.numel(), (rows, 32, redraw), generator=gen, device=gen.device)]
    qb[:, 32:].scatter_(2, picks.view(rows, 32, redraw), fresh)
    w = torch.full((rows, 64), weight, device=qb.device)
    w[:, 32:] = -weight
    x = {**x, "q_index_fp8": qb.view(torch.float8_e4m3fn), "weights": w}
    k = definitions.reference_module(INDEXER).dequant_k_cache(x["k_index_cache_fp8"]).flatten(0, 1)
    cap = x["block_table"].shape[1] * 64
    lens = []
    for row in range(rows):
        scores = indexer_terms(x, row, cap, k)[1].sum(1)
        lo, hi = 2049, cap       # the 2048th largest of the first n tokens grows with n: bisect for its sign change
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if float(torch.topk(scores[:mid], 2048).values[-1]) < 0 else (lo, mid)
        lens.append(lo)
    return {**x, "seq_lens": torch.tensor(lens, dtype=torch.int32, device=qb.device)}


def write_package(root, definition: str, main_py: str, name: str = "fixture", **build) -> Path:
    """A solution package folder (config.toml + solution/python/main.py) for tests."""
    root = Path(root)
    (root / "solution" / "python").mkdir(parents=True, exist_ok=True)
    (root / "solution" / "python" / "main.py").write_text(main_py)
    spec = {"language": "python", "entry_point": "main.py::run", "destination_passing_style": True,
            "binding": "torch", "source_dir": "python", **build}
    lines = ["[solution]", f'name = "{name}"', f'definition = "{definition}"', 'author = "tests"', "", "[build]"]
    lines += [f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, str) else v}"
              for k, v in spec.items()]
    (root / "config.toml").write_text("\n".join(lines).replace("'", '"') + "\n")
    return root


def cli_runner():
    """A click test runner that keeps stderr apart on every click the SDK runs with (litellm pins click 8.1, where
    that must be asked for; 8.2 and later always do it and no longer take the argument)."""
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


@functools.cache
def noxfile_module():
    """The repository's noxfile, loaded once per process: nox registers each session by name, and a second load
    re-registers them (a FutureWarning today, an error in later nox)."""
    spec = importlib.util.spec_from_file_location("noxfile_under_test", Path(__file__).resolve().parent.parent /
                                                  "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
