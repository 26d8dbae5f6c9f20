"""`fib-sdk env`: getting the SDK and its peers onto an offline GPU machine, and reporting what a run is based on.

The device path, in order:
1. here (online): `fib-sdk env wheels --dest .whl` downloads the pinned peer wheels for the GPU machine's Python
   (3.12, manylinux x86_64) with --no-deps and trims the oversized ones; `.whl/` is git-ignored and travels with
   the checkout;
2. there (offline): `eval "$(python3 -m sdk env install)"` installs them into a target folder and exports
   PYTHONPATH (checkout + target) and the JIT cache locations;
3. there: `python3 -m sdk env prebuild` compiles every available peer's JIT kernels (and the probe kernel) once,
   each in a child process, so the bench's first workload does not pay minutes of compiles; `--check` also gates
   and roughly times each peer.

Nothing in this package imports flashinfer-bench or torch at import time: step 2 runs before they are importable.
"""
