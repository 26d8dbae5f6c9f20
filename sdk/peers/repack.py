"""Trim a downloaded wheel to the files the peers need, keeping its name, version and tags.

Some peer wheels are far larger than what the adapters use (sglang-kernel 0.4.6 is 377 MB, almost all of it
FA3 and SM100 code). The device call carries at most 64 MiB, so the wheel is rewritten without the dropped
members and with a fresh RECORD (pip checks nothing else). Usage:

    python -m sdk.peers.repack SRC.whl DEST_DIR [PATTERN ...]

PATTERNs are fnmatch globs of archive members to drop; without any, `SGLANG_KERNEL_DROP` is used, which is how
`.whl/sglang_kernel-0.4.6-cp310-abi3-manylinux2014_x86_64.whl` (13.8 MiB, from 377 MB) was made.
"""
from __future__ import annotations

import base64
import fnmatch
import hashlib
import sys
import zipfile
from pathlib import Path

# FA3 (1.1 GB), the SM100 build, the InfLLM extension (loaded lazily) and the unrelated triton_kernels package.
SGLANG_KERNEL_DROP = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/*", "sgl_kernel/infllm_ops*.so",
                      "triton_kernels/*")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(src: Path, dest_dir: Path, drop: tuple[str, ...]) -> Path:
    dest = Path(dest_dir) / Path(src).name
    if dest.resolve() == Path(src).resolve():
        raise SystemExit("destination would overwrite the source wheel")
    with zipfile.ZipFile(src) as zin:
        members = [i for i in zin.infolist() if not i.is_dir()]
        record = next(i.filename for i in members if i.filename.endswith(".dist-info/RECORD"))
        kept = [i for i in members if i.filename != record
                and not any(fnmatch.fnmatch(i.filename, p) for p in drop)]
        lines = []
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in kept:
                data = zin.read(info)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                lines.append(_record_line(info.filename, data))
            lines.append(f"{record},,")
            zout.writestr(record, "\n".join(lines) + "\n")
    return dest


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip())
        return 2
    out = repack(Path(argv[0]), Path(argv[1]), tuple(argv[2:]) or SGLANG_KERNEL_DROP)
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
