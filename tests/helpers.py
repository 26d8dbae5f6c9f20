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
