# Prepared in session 14 for the next one (run here, on the CPU, before the device call): renders the MoE solution
# with the wip patches beside this script into .variants/<name>/ (untracked: it travels with the working tree to
# the device), each under its own extension name, for moe_variants_ab.py.
#   rw:       wip-moe-row-weights-early.patch (GEMM2's routing weights loaded before the K loop, both GEMM kernels)
#   rw_half:  + wip-moe-idle-half-tiles.patch (a warpgroup with no rows in a 128-row tile skips its MMAs)
#   all:      + wip-moe-onepass-hardening.patch (the session-14 review's items; no speed change expected)
# Run from the repository root: python3 repro/runs/h200-20261204-s14-dev/make_variants.py
import shutil, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, ".")
from sdk import regenerate  # noqa: E402

HERE = Path(__file__).parent
VARIANTS = {"rw": ["wip-moe-row-weights-early.patch"],
            "rw_half": ["wip-moe-row-weights-early.patch", "wip-moe-idle-half-tiles.patch"],
            "all": ["wip-moe-row-weights-early.patch", "wip-moe-idle-half-tiles.patch",
                    "wip-moe-onepass-hardening.patch"]}

for name, patches in VARIANTS.items():
    work = Path(tempfile.mkdtemp())
    shutil.copytree("templates", work / "templates")
    for patch in patches:
        subprocess.run(["git", "apply", str((HERE / patch).resolve())], cwd=work, check=True)
    dest = HERE / ".variants" / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree("solutions/fused_moe", dest)
    regenerate.rewrite(dest, work / "templates")
    main = dest / "solution" / "python" / "main.py"
    main.write_text(main.read_text().replace('"fused_moe_fp8_sm90"', f'"fused_moe_fp8_sm90_{name}"'))
    print(f"{dest}: {', '.join(patches)}")
