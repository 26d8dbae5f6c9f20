# Throwaway (session 19): session 18's kernels.py (per-kernel device time of solutions/fused_moe = "cand" and every
# copy in the s16 .variants folder, same inputs) with GEMM1 and GEMM2 told apart by their epilogue template argument
# (session 18's names cut the templates, so both GEMMs summed into one row).
# Run from the repository root on the GPU: python3 repro/runs/h200-20261207-s19-dev/kernels.py T,seed ...
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kernels_s18", Path(__file__).parents[1] / "h200-20261207-s18-dev" /
                                               "kernels.py")
k18 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k18)
_short18 = k18.short


def short(name):
    gemm = "GEMM1 " if "Epi)2" in name else "GEMM2 " if "Epi)1" in name else ""
    return gemm + _short18(name)[-42:]


k18.short = short
if __name__ == "__main__":
    k18.main()
