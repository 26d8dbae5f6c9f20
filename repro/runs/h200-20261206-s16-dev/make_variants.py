# Session 16 (run from the repository root, on the CPU, after `git apply` of wip-moe-s15-s16.patch): re-renders
# solutions/fused_moe from the templates, and into .variants/ beside this script: landed (HEAD's solution, kept as
# is), cand_half (+ idle half tiles: the edit below, applied to a copy of the template and also left beside this
# script as cand_half_moe_wgmma.cuh for land.sh), cand_ga_half (+ GATHER_A = 1).
import shutil, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, ".")
from sdk import regenerate  # noqa: E402

R = Path(__file__).parent
HALF_1 = "      float next_x = __ldg(sfb_x), next_y = __ldg(sfb_y);\n\n      float part[C::kAcc];"
HALF_1N = """      float next_x = __ldg(sfb_x), next_y = __ldg(sfb_y);
      // A warpgroup whose 64 rows all lie past the group's last row (an expert's last, short m-tile) only keeps the
      // ring's protocol: it waits for each stage (so it never runs a ring phase ahead) and releases it, no MMA.
      const bool no_rows = wgi * 64 >= t.rows;

      float part[C::kAcc];"""
HALF_2 = ("        sm90::mbar_wait(full0 + 8 * stage, phase);\n"
          "        const float* sfa = reinterpret_cast<const float*>(smem + C::kOffSfa")
HALF_2N = """        sm90::mbar_wait(full0 + 8 * stage, phase);
        if (no_rows) {  // uniform over the warpgroup
          if constexpr (kDefer) {
            if (kb == 0 && has_pending) {
              store_plain(pending, pending_w);
              has_pending = false;
            }
          }
          __syncwarp();
          if (lane == 0) sm90::mbar_arrive(empty0 + 8 * stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
          continue;
        }
        const float* sfa = reinterpret_cast<const float*>(smem + C::kOffSfa"""


def variant(name, templates, params=None):
    d = R / ".variants" / name
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree("solutions/fused_moe", d)
    rt = d / "render.toml"
    text = rt.read_text()
    for k, v in (params or {}).items():
        text = "\n".join(f"{k} = {v}" if line.startswith(f"{k} = ") else line for line in text.splitlines()) + "\n"
    rt.write_text(text)
    regenerate.rewrite(d, templates)
    main = d / "solution" / "python" / "main.py"
    main.write_text(main.read_text().replace('"fused_moe_fp8_sm90"', f'"fused_moe_fp8_sm90_{name}"'))
    print(d)


if __name__ == "__main__":
    if not (R / ".variants" / "landed").exists():
        (R / ".variants").mkdir(parents=True, exist_ok=True)
        subprocess.run(f"git archive HEAD solutions/fused_moe | tar -x -C {R / '.variants'} && mv "
                       f"{R / '.variants' / 'solutions' / 'fused_moe'} {R / '.variants' / 'landed'} && rmdir "
                       f"{R / '.variants' / 'solutions'}", shell=True, check=True)
        main = R / ".variants" / "landed" / "solution" / "python" / "main.py"
        main.write_text(main.read_text().replace('"fused_moe_fp8_sm90"', '"fused_moe_fp8_sm90_landed"'))
    regenerate.rewrite(Path("solutions/fused_moe"))
    work = Path(tempfile.mkdtemp())
    shutil.copytree("templates", work / "templates")
    f = work / "templates" / "fused_moe" / "moe_wgmma.cuh"
    s = f.read_text()
    assert s.count(HALF_1) == 1 and s.count(HALF_2) == 1
    f.write_text(s.replace(HALF_1, HALF_1N).replace(HALF_2, HALF_2N))
    shutil.copy(f, R / "cand_half_moe_wgmma.cuh")
    variant("cand_half", work / "templates")
    variant("cand_ga_half", work / "templates", {"GATHER_A": 1})
