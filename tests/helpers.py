"""Small workloads of the real definitions, so CPU tests run the full pipeline in seconds."""
from pathlib import Path

from sdk import workloads
from sdk._fib import Workload

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"


def small(definition: str, uuid: str = "small", **axes) -> Workload:
    """A workload with the official input kinds of `definition` and the given (small) axis values."""
    return Workload(uuid=uuid, axes=axes, inputs=workloads.load(definition)[0].inputs)


def small_indexer(uuid="small-indexer", batch_size=3, max_num_pages=40, num_pages=200) -> Workload:
    return small(INDEXER, uuid, batch_size=batch_size, max_num_pages=max_num_pages, num_pages=num_pages)


def small_attention(uuid="small-attention", num_tokens=3, num_pages=80) -> Workload:
    return small(ATTENTION, uuid, num_tokens=num_tokens, num_pages=num_pages)


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
