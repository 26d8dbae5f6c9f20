"""`fib-sdk bench --remote modal`: the same bench on a Modal B200, as the contest's starter kit runs it.

The job's payload is plain JSON (solutions as flashinfer-bench `Solution` models plus the bench settings), the
remote side rebuilds the packages and calls `run_bench`, and the answer is a results dict that is checked before it
is saved. Nothing here reaches the network until `run_modal` is called with the optional `modal` package installed
(`pip install fib-contest-sdk[modal]` and `modal token new`); the payload and the parsing are tested offline.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .._fib import Solution
from ..errors import BadInputError, UnavailableError
from ..solutions import SolutionPackage
from .rows import SCHEMA
from .runner import results_path

SETTINGS = ("keys", "stride", "trials", "seed")
MODAL_GPU = "B200"
MODAL_IMAGE_PACKAGES = ["torch==2.12.0", "flashinfer-bench==0.1.2", "click", "jinja2", "tabulate", "pydantic",
                        "safetensors", "docstring-parser", "matplotlib"]


def build_payload(packages: list[SolutionPackage], **settings) -> dict:
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise BadInputError(f"unknown remote bench settings {sorted(unknown)}")
    return {"schema": "fib-sdk.remote-job/1", "gpu": MODAL_GPU,
            "solutions": [p.solution.model_dump(mode="json") for p in packages], "settings": settings}


def packages_from_payload(payload: dict, workdir: Path) -> list[SolutionPackage]:
    if payload.get("schema") != "fib-sdk.remote-job/1":
        raise BadInputError("not a fib-sdk remote job payload")
    out = []
    for raw in payload["solutions"]:
        solution = Solution.model_validate(raw)
        root = workdir / solution.name
        (root / "solution").mkdir(parents=True, exist_ok=True)
        out.append(SolutionPackage(root=root, source_dir=root / "solution", solution=solution))
    return out


def remote_entry(payload_json: str) -> str:
    """What runs on the Modal machine: rebuild the packages, bench them, return the results as JSON."""
    import tempfile

    from .config import BenchConfig
    from .runner import run_bench

    payload = json.loads(payload_json)
    with tempfile.TemporaryDirectory() as tmp:
        packages = packages_from_payload(payload, Path(tmp))
        settings = payload["settings"]
        config = BenchConfig(keys=settings.get("keys") or [], stride=settings.get("stride", 1),
                             trials=settings.get("trials", 3), seed=settings.get("seed"))
        results, _ = run_bench(packages, config, out_dir=None)
    results["environment"]["remote"] = f"modal:{MODAL_GPU}"
    return json.dumps(results, default=str)


def parse_result(text: str) -> dict:
    try:
        results = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"remote bench returned no JSON ({exc})") from None
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        raise BadInputError(f"remote bench returned schema {results.get('schema') if isinstance(results, dict) else None!r}, "
                            f"expected {SCHEMA!r}")
    for key in ("environment", "rows", "summary"):
        if key not in results:
            raise BadInputError(f"remote bench result lacks {key!r}")
    return results


def run_modal(packages: list[SolutionPackage], **settings) -> dict:
    try:
        import modal
    except ImportError:
        raise UnavailableError("--remote modal needs the optional `modal` package: python -m pip install -e "
                               "'.[modal]', then `modal token new` (README, 'Remote bench on Modal')") from None
    payload = build_payload(packages, **settings)
    app = modal.App("fib-sdk-bench")
    image = modal.Image.debian_slim(python_version="3.12").pip_install(*MODAL_IMAGE_PACKAGES).add_local_python_source("sdk")
    remote = app.function(gpu=MODAL_GPU, image=image, timeout=3600)(remote_entry)
    with app.run():
        return parse_result(remote.remote(json.dumps(payload)))


def save(results: dict, out_dir: Path, tag: str | None) -> Path:
    path = results_path(results["environment"], tag, Path(out_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, path)
    return path
