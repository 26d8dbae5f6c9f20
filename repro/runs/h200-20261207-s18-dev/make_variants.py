# Throwaway (session 18, CPU, repository root, on branch s18-cand: prep.sh runs it): the session-16 candidate
# ("cand") lost 1-4% at T = 11948 / 14107 against landed on the H100 A/B while winning 5-48% at T <= 80. Variants
# that each undo one of cand's changes on paths the large-T calls take, to find the culprit, each as
# .variants/<name> (solution, own extension name) plus .vtemplates/<name> beside this script (its
# templates/fused_moe, copied over on the device before a repro so the results file's sources_sha256 names exactly
# what ran):
#   c_oldroute: landed's routing (moe_routing.cuh from main: shuffle arg-max rounds, not redux.sync);
#   c_nodefer:  GEMM2's plain epilogue stores right after its K loop (no deferral into the next unit);
#   c_accinit:  (written after the A/B, for the next one) GEMM1's accumulators zeroed before each pass's K loop and
#               every K block added, as landed does, instead of a kb == 0 / kb > 0 branch in the hot loop (the
#               assignment at kb == 0 stays for GEMM2, whose accumulators hold the deferred unit until then).
import shutil, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, ".")
from sdk import regenerate  # noqa: E402

R = Path(__file__).parent
V = Path("repro/runs/h200-20261206-s16-dev/.variants")
DEFER = "  constexpr bool kDefer = !C::kSwiGlu;"
EPI = "      if constexpr (kDefer) {\n        pending = t;"
PART = "      float part[C::kAcc];  // K block kb's fresh sum; kb = 0 sets acc, later blocks add to it\n"
PART_N = PART + """      if constexpr (!kDefer) {
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
      }
"""
FIRST = "        if (kb == 0) {  // the unit's (pass's) first block"
FIRST_N = "        if (kDefer && kb == 0) {  // the unit's (pass's) first block"
EPI_N = "      if constexpr (!C::kSwiGlu && !kDefer) {\n        store_plain(t, row_w);\n      } else if constexpr (kDefer) {\n        pending = t;"


def variant(name, edit):
    work = Path(tempfile.mkdtemp())
    shutil.copytree("templates", work / "templates")
    edit(work / "templates" / "fused_moe")
    d = V / name
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree("solutions/fused_moe", d)
    regenerate.rewrite(d, work / "templates")
    main = d / "solution" / "python" / "main.py"
    main.write_text(main.read_text().replace('"fused_moe_fp8_sm90"', f'"fused_moe_fp8_sm90_{name}"'))
    t = R / ".vtemplates" / name
    shutil.rmtree(t, ignore_errors=True)
    shutil.copytree(work / "templates" / "fused_moe", t)
    print(d)


def old_route(t):
    (t / "moe_routing.cuh").write_text(subprocess.run(["git", "show", "main:templates/fused_moe/moe_routing.cuh"],
                                                      capture_output=True, text=True, check=True).stdout)


def no_defer(t):
    f = t / "moe_wgmma.cuh"
    s = f.read_text()
    assert s.count(DEFER) == 1 and s.count(EPI) == 1
    f.write_text(s.replace(DEFER, "  constexpr bool kDefer = false;").replace(EPI, EPI_N))


def acc_init(t):
    f = t / "moe_wgmma.cuh"
    s = f.read_text()
    assert s.count(PART) == 1 and s.count(FIRST) == 1
    f.write_text(s.replace(PART, PART_N).replace(FIRST, FIRST_N))


if __name__ == "__main__":
    variant("c_oldroute", old_route)
    variant("c_nodefer", no_defer)
    variant("c_accinit", acc_init)
