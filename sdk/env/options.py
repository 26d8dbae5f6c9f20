"""The `--definitions DIR` option shared by the commands that read definitions (no SDK imports until it is used)."""
from __future__ import annotations

from pathlib import Path

import click


def _use(ctx, param, value):
    if value is not None:
        from ..definitions import sources

        sources.use_dataset(value)  # sets FIB_DATASET_PATH, so gate workers started later read the same files
    return value


def definitions_option(command):
    return click.option(
        "--definitions", "definitions_dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
        expose_value=False, is_eager=True, callback=_use,
        help="Official FlashInfer-Bench definitions + workloads (flashinfer-trace or flat layout) to use instead of "
             "the SDK's own, e.g. shared/flashinfer-trace; the same as FIB_DATASET_PATH.")(command)
