"""What ncu runs for the profiler role: build one candidate package and call it a few times on one workload.

    python -m sdk.agent.profile_driver PACKAGE_DIR DEFINITION WORKLOAD_UUID
"""
from __future__ import annotations

import sys


def main(package_dir: str, definition_name: str, workload_uuid: str, calls: int = 3) -> None:
    import torch

    from .. import definitions, inputs, solutions, workloads
    definition = definitions.load(definition_name)
    workload = workloads.select(definition_name, [workload_uuid])[0]
    fn = solutions.build(solutions.load_package(package_dir).solution, definition)
    args = inputs.make_inputs(definition, workload, seed=0, device="cuda")
    outs = inputs.alloc_outputs(definition, workload, device="cuda")
    for _ in range(calls):
        fn(*args.values(), *outs.values())
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:4])
