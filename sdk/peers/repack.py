"""Trim a downloaded wheel to the files the peers need, keeping its name, version and tags.

Some peer wheels are far larger than what the adapters use (sglang-kernel 0.4.6 is 377 MB, almost all of it
FA3 and SM100 code; the MoE Triton peer needs one Python file of the 14.6 MB sglang wheel and one JSON file of the
304 MB vLLM wheel). The device call carries at most 64 MiB, so the wheel is rewritten without the dropped members
and with a fresh RECORD (pip checks nothing else). A trim either drops members (`drop`) or keeps only some
(`keep`; the dist-info metadata pip needs stays, console-script entry points do not, since their modules are gone).
A keep-trimmed package has no `__init__.py` left, so it installs as a namespace package: importing it runs none of
the original package's code. Usage:

    python -m sdk.peers.repack SRC.whl DEST_DIR [PATTERN ...]          # drop these members
    python -m sdk.peers.repack SRC.whl DEST_DIR --keep PATTERN ...     # keep only these members

PATTERNs are fnmatch globs of archive members (`[` starts a character class). Without any, the trim of the wheel's
distribution in `TRIMS` is used, which is how `.whl/sglang_kernel-0.4.6-cp310-abi3-manylinux2014_x86_64.whl`
(13.8 MiB, from 377 MB) was made.
"""
from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

# FA3 (1.1 GB), the SM100 build, the InfLLM extension (loaded lazily) and the unrelated triton_kernels package.
SGLANG_KERNEL_DROP = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/*", "sgl_kernel/infllm_ops*.so",
                      "triton_kernels/*")
# The MoE Triton peer (sdk.peers.moe.SglangTritonMoe): sglang's fused_moe Triton kernels, and vLLM's tuned
# fused_moe configs for this contest's expert slice (E=32 local experts, intermediate N=2048, FP8 [128,128] blocks).
SGLANG_MOE_KERNELS = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
VLLM_MOE_CONFIGS = "vllm/model_executor/layers/fused_moe/configs"
VLLM_MOE_CONFIG_GLOB = f"{VLLM_MOE_CONFIGS}/E=32,N=2048,device_name=*,dtype=fp8_w8a8,block_shape=*.json"
# What a keep-trim keeps of X.dist-info/ besides the members asked for (RECORD is always rewritten).
DIST_INFO_KEEP = ("METADATA", "WHEEL", "top_level.txt", "LICENSE*", "licenses/*")


@dataclass(frozen=True)
class Trim:
    drop: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()  # when given: only these members (and the dist-info metadata) stay


TRIMS = {  # by distribution name, as in sdk.env.wheels
    "sglang-kernel": Trim(drop=SGLANG_KERNEL_DROP),
    "sglang": Trim(keep=(SGLANG_MOE_KERNELS,)),
    "vllm": Trim(keep=(VLLM_MOE_CONFIG_GLOB,)),
}


def _record_row(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def _record(rows: list[list[str]]) -> str:
    """RECORD is CSV: names with commas (vLLM's config files) are quoted."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _dist_info_file(name: str) -> str | None:
    """'pkg-1.0.dist-info/licenses/LICENSE' -> 'licenses/LICENSE'; None outside the top-level dist-info folder."""
    top, _, rest = name.partition("/")
    return rest if top.endswith(".dist-info") and rest else None


def kept_members(names: list[str], drop: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> list[str]:
    """The archive members a trim keeps, in archive order (RECORD excluded: it is rewritten)."""
    out = []
    for name in names:
        meta = _dist_info_file(name)
        if meta == "RECORD" or any(fnmatch.fnmatchcase(name, p) for p in drop):
            continue
        if keep and not any(fnmatch.fnmatchcase(name, p) for p in keep) and not (
                meta is not None and any(fnmatch.fnmatchcase(meta, p) for p in DIST_INFO_KEEP)):
            continue
        out.append(name)
    return out


def repack(src: Path, dest_dir: Path, drop: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> Path:
    dest = Path(dest_dir) / Path(src).name
    if dest.resolve() == Path(src).resolve():
        raise SystemExit("destination would overwrite the source wheel")
    with zipfile.ZipFile(src) as zin:
        members = {i.filename: i for i in zin.infolist() if not i.is_dir()}
        record = next(n for n in members if _dist_info_file(n) == "RECORD")
        kept = kept_members(list(members), drop, keep)
        if keep and not any(_dist_info_file(n) is None for n in kept):
            raise SystemExit(f"{Path(src).name}: no member matches {list(keep)}")
        rows = []
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for name in kept:
                data = zin.read(members[name])
                zout.writestr(members[name], data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                rows.append(_record_row(name, data))
            rows.append([record, "", ""])
            zout.writestr(record, _record(rows))
    return dest


def distribution(wheel_file: Path) -> str:
    """'sglang_kernel-0.4.6-cp310-....whl' -> 'sglang-kernel' (the name TRIMS is keyed by)."""
    return Path(wheel_file).name.split("-")[0].replace("_", "-").lower()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip())
        return 2
    src, dest, patterns = Path(argv[0]), Path(argv[1]), argv[2:]
    if patterns[:1] == ["--keep"]:
        if len(patterns) == 1:
            print("--keep needs at least one PATTERN", file=sys.stderr)
            return 2
        trim = Trim(keep=tuple(patterns[1:]))
    elif patterns:
        trim = Trim(drop=tuple(patterns))
    elif distribution(src) in TRIMS:
        trim = TRIMS[distribution(src)]
    else:
        print(f"no trim known for {distribution(src)}; name the members to drop or --keep", file=sys.stderr)
        return 2
    out = repack(src, dest, trim.drop, trim.keep)
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
