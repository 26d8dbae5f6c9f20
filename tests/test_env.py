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
from sdk.peers import repack
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
    out = cli_runner().invoke(main, ["env", "wheels", "--dry-run", "--only", "sglang", "--only", "vllm"])
    sglang, vllm = out.output.strip().splitlines()
    assert "sglang==0.5.16" in sglang and "vllm==0.26.0" in vllm and "repack" in sglang and "repack" in vllm


def test_every_pinned_wheel_is_exact_and_unknown_names_fail():
    assert all(w.version and "==" in w.requirement for w in wheels.WHEELS)
    with pytest.raises(BadInputError, match="unknown wheel"):
        wheels.select(["not-a-wheel"])


def make_wheel(folder: Path, name="fibprobe_pkg", version="1.0", extra: dict | None = None) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             **(extra or {})}
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


def test_the_pinned_wheels_fit_what_a_device_call_carries():
    total = wheels.carried_mib()
    assert total <= wheels.CARRY_BUDGET_MIB, f"{total:.1f} MiB of wheels, over {wheels.CARRY_BUDGET_MIB} MiB"
    assert all(w.mib > 0 for w in wheels.WHEELS)
    for w in wheels.WHEELS:
        assert w.trim == (w.name in repack.TRIMS), w.name
    assert {w.name for w in wheels.WHEELS if repack.TRIMS.get(w.name, repack.Trim()).keep} == {"sglang", "vllm"}
    carried = sorted((ROOT / ".whl").glob("*.whl")) if (ROOT / ".whl").is_dir() else []
    assert sum(p.stat().st_size for p in carried) / 2**20 <= wheels.CARRY_BUDGET_MIB


SGLANG_MEMBERS = ["sglang/__init__.py", "sglang/kernels/__init__.py", "sglang/kernels/ops/moe/__init__.py",
                  repack.SGLANG_MOE_KERNELS, "sglang/kernels/ops/moe/fused_moe_lora_kernel.py",
                  "sglang/srt/utils/common.py", "sglang-0.5.16.dist-info/METADATA", "sglang-0.5.16.dist-info/WHEEL",
                  "sglang-0.5.16.dist-info/entry_points.txt", "sglang-0.5.16.dist-info/licenses/LICENSE",
                  "sglang-0.5.16.dist-info/top_level.txt", "sglang-0.5.16.dist-info/RECORD"]
CONFIGS = repack.VLLM_MOE_CONFIGS
VLLM_MEMBERS = ["vllm/__init__.py", "vllm/model_executor/layers/fused_moe/fused_moe.py",
                f"{CONFIGS}/E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
                f"{CONFIGS}/E=32,N=2048,device_name=NVIDIA_B200,dtype=fp8_w8a8,block_shape=[128,128].json",
                f"{CONFIGS}/E=32,N=2048,device_name=NVIDIA_H200.json",
                f"{CONFIGS}/E=32,N=1408,device_name=NVIDIA_B200.json",
                f"{CONFIGS}/E=256,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
                "vllm/_C.abi3.so", "vllm-0.26.0.dist-info/METADATA", "vllm-0.26.0.dist-info/WHEEL",
                "vllm-0.26.0.dist-info/RECORD"]


def test_trims_keep_only_what_the_peers_use():
    sglang = repack.kept_members(SGLANG_MEMBERS, **vars(repack.TRIMS["sglang"]))
    assert sglang == [repack.SGLANG_MOE_KERNELS, "sglang-0.5.16.dist-info/METADATA", "sglang-0.5.16.dist-info/WHEEL",
                      "sglang-0.5.16.dist-info/licenses/LICENSE", "sglang-0.5.16.dist-info/top_level.txt"]
    vllm = repack.kept_members(VLLM_MEMBERS, **vars(repack.TRIMS["vllm"]))
    assert vllm == [VLLM_MEMBERS[2], VLLM_MEMBERS[3], "vllm-0.26.0.dist-info/METADATA", "vllm-0.26.0.dist-info/WHEEL"]
    kernel = ["sgl_kernel/__init__.py", "sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so",
              "sgl_kernel/sm90/common_ops.abi3.so", "triton_kernels/x.py", "sglang_kernel-0.4.6.dist-info/RECORD",
              "sglang_kernel-0.4.6.dist-info/entry_points.txt"]
    assert repack.kept_members(kernel, **vars(repack.TRIMS["sglang-kernel"])) == [
        "sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so", "sglang_kernel-0.4.6.dist-info/entry_points.txt"]


def test_repack_writes_a_csv_record_that_names_every_kept_file(tmp_path):
    import csv
    import hashlib
    from base64 import urlsafe_b64encode

    config = "fibprobe_pkg/configs/E=32,N=2048,block_shape=[128,128].json"
    src = make_wheel(tmp_path, extra={config: "{}\n", "fibprobe_pkg/big.bin": "x" * 1000})
    (tmp_path / "out").mkdir()
    out = repack.repack(src, tmp_path / "out", keep=("fibprobe_pkg/configs/*",))
    with zipfile.ZipFile(out) as z:
        record = z.read("fibprobe_pkg-1.0.dist-info/RECORD").decode()
        rows = list(csv.reader(record.splitlines()))
        assert sorted(r[0] for r in rows) == sorted(z.namelist()) and all(len(r) == 3 for r in rows)
        assert config in z.namelist() and "fibprobe_pkg/__init__.py" not in z.namelist()
        for name, digest, size in rows[:-1]:
            data = z.read(name)
            assert size == str(len(data))
            assert digest == "sha256=" + urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with pytest.raises(SystemExit, match="no member"):
        repack.repack(src, tmp_path / "out", keep=("nothing/*",))
