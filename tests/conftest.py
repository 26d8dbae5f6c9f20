import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED_CONTEST = Path(os.environ.get("FIB_SHARED_CONTEST", ROOT.parent / "shared" / "contest"))


def pytest_collection_modifyitems(config, items):
    import torch

    # Under pytest-xdist (`nox -s tests` runs two workers), the full-size CPU runs share one worker: each holds
    # several GB of MoE weights, and two at once would not fit a 24 GB CI machine.
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("full-size-cpu"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none here (these tests run "
                                   "where `python -c 'import torch; print(torch.cuda.is_available())'` says True)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_contest() -> Path:
    if not (SHARED_CONTEST / "definitions").is_dir():
        pytest.skip(f"official contest files not found at {SHARED_CONTEST} (set FIB_SHARED_CONTEST)")
    return SHARED_CONTEST
