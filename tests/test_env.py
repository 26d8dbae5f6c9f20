"""`fib-sdk env`: the wheel download commands, the offline install and its exports, the peer prebuild's bookkeeping."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tests.helpers import cli_runner

from sdk.cli import main
from sdk.env import wheels
from sdk.errors import BadInputError

ROOT = Path(__file__).resolve().parent.parent


def test_download_commands_target_the_device_interpreter_without_dependencies():
    out = cli_runner().invoke(main, ["env", "wheels", "--dry-run", "--dest", "W", "--only", "pydantic-core",
                                    "--only", "sglang-kernel"])
    assert out.exit_code == 0, out.output
    core, kernel = out.output.strip().splitlines()
    for flag in ("download --no-deps --only-binary=:all:", "--python-version 3.12", "--abi cp312",
                 "--platform manylinux2014_x86_64", "--dest W"):
        assert flag in core
    assert core.endswith("pydantic-core==2.50.5") and "sglang-kernel==0.4.6" in kernel and "repack" in kernel


def test_every_pinned_wheel_is_exact_and_unknown_names_fail():
    assert all(w.version and "==" in w.requirement for w in wheels.WHEELS)
    with pytest.raises(BadInputError, match="unknown wheel"):
        wheels.select(["not-a-wheel"])


def make_wheel(folder: Path, name="fibprobe_pkg", version="1.0") -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
        z.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in files) + f"{info}/RECORD,,\n")
    return path


def test_install_is_offline_into_a_target_and_prints_only_exports(tmp_path):
    (tmp_path / "whl").mkdir()
    make_wheel(tmp_path / "whl")
    target, cache = tmp_path / "site", tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "sdk", "env", "install", "--wheels", str(tmp_path / "whl"),
                           "--target", str(target), "--cache", str(cache)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines and all(line.startswith("export ") for line in lines)  # safe to eval
    shell = "; ".join(lines) + "; python3 -c 'import fibprobe_pkg, sdk; print(fibprobe_pkg.VALUE)'; echo $FIB_SDK_CACHE"
    got = subprocess.run(["bash", "-c", shell], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["42", str(cache.resolve())], got.stderr


def test_prebuild_without_a_gpu_reports_every_peer_as_a_row(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the prebuild really compiles (tens of seconds to minutes)")
    out = cli_runner().invoke(main, ["env", "prebuild", "--out", str(tmp_path), "--budget-s", "60"])
    assert out.exit_code == 0, out.output
    report = json.loads((tmp_path / "peers_prebuild.json").read_text())
    from sdk import peers

    assert {r["peer"] for r in report["rows"]} == {p.name for p in peers.all_peers()} | {"fib-sdk.probe"}
    assert all(r["available"] is False and r["reason"] for r in report["rows"])
    assert not report["errors"] and not list(tmp_path.glob("*.events.jsonl"))
