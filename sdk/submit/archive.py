"""A tar.gz whose bytes depend only on the files' names and contents.

Entries are sorted, relative, under one top folder; every entry has mtime 0, uid/gid 0, no owner names and mode
0755 (folders) or 0644 (files); the gzip header has mtime 0 and no file name. The same tree therefore gives the
same archive and the same sha256 (with the same zlib; a different zlib may compress differently).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from ..errors import BadInputError


def _info(name: str, size: int = 0, folder: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if folder else tarfile.REGTYPE
    info.size, info.mode, info.mtime = size, 0o755 if folder else 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def tar_bytes(root: Path, top: str) -> bytes:
    root = Path(root)
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_info(top, folder=True))
            for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
                name = f"{top}/{path.relative_to(root).as_posix()}"
                if path.is_symlink() or not (path.is_dir() or path.is_file()):
                    raise BadInputError(f"{path}: only plain files and folders can be archived")
                if path.is_dir():
                    tar.addfile(_info(name, folder=True))
                else:
                    data = path.read_bytes()
                    tar.addfile(_info(name, len(data)), io.BytesIO(data))
    return raw.getvalue()


def write_archive(root: Path, archive: Path) -> str:
    """Write `archive` (a .tar.gz of `root`, top folder named like `root`) and `<archive>.sha256` in sha256sum
    format; returns the digest."""
    data = tar_bytes(root, Path(root).name)
    digest = hashlib.sha256(data).hexdigest()
    archive.parent.mkdir(parents=True, exist_ok=True)
    for path, content in ((archive, data), (Path(f"{archive}.sha256"), f"{digest}  {archive.name}\n".encode())):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(content)
        os.replace(tmp, path)
    return digest
