"""The static scan, rule by rule on small snippets, and on every honest solution and template (no false alarms)."""
from pathlib import Path

import pytest

from sdk import solutions
from sdk.gate.scan import Finding, reason, scan_sources

ROOT = Path(__file__).resolve().parents[2]


def rules(text: str, path: str = "main.py") -> set[str]:
    return {f.rule for f in scan_sources([(path, text)])}


CAUGHT = {
    "forbidden-import": ["import ctypes", "from sdk.definitions import reference", "import flashinfer_bench as f",
                         "from concurrent.futures import ThreadPoolExecutor", "import importlib.util",
                         "from .. import secrets", "import deep_gemm", "from gc import get_objects",
                         "import traceback", "import torch\nclass M(torch.overrides.TorchFunctionMode):\n    pass",
                         "import torch\nn = torch._C._len_torch_function_stack()"],
    "dynamic-code": ["x = eval('1')", "exec(code)", "m = __import__('os')", "g = globals()", "v = vars(time)",
                     "def f(m, n):\n    return getattr(m, 'St' + n)"],
    "host-thread": ["import torch\nf = torch.jit.fork(g, x)"],
    "introspection": ["import sys\nf = sys._getframe(1)", "import sys\nm = sys.modules['x']",
                      "import sys\nm = getattr(sys, 'modules')",
                      "def run(x):\n    return x.__globals__", "t = tb.tb_frame.f_back.f_locals",
                      "from sys import modules", "from sys import _getframe as g", "import os\nm = os.sys"],
    "cuda-stream": ["import torch\ns = torch.cuda.Stream()", "import torch\ns = torch.cuda.ExternalStream(0)",
                    "import torch\ntorch.cuda.set_stream(s)", "import torch as T\nwith T.cuda.stream(s):\n    pass",
                    "def run(x):\n    x.record_stream(s)", "import torch\ng = torch.cuda.CUDAGraph()"],
    "pointer-key": ["def run(x, out):\n    k = x.data_ptr()", "def run(x, out):\n    k = id(x)",
                    "def run(x, out):\n    k = hash(x)", "def run(x, out):\n    v = x._version",
                    "def run(x, out):\n    s = x.untyped_storage()", "def run(x, out):\n    p = getattr(x, 'data_ptr')()"],
    "memoize": ["import functools\n@functools.lru_cache(None)\ndef f(x):\n    return x",
                "from functools import cache\n@cache\ndef f(x, y):\n    return x"],
    "global-state": ["_C = {}\ndef run(x, out):\n    _C[1] = out", "_C = []\ndef run(x, out):\n    _C.append(out)",
                     "n = 0\ndef run(x, out):\n    global n\n    n += 1",
                     "last = None\ndef run(x, out):\n    global last\n    last = out.clone()",
                     "def run(x, out, _seen={}):\n    pass", "def run(x, out):\n    run.last = out",
                     "class S:\n    pass\n_S = S()\ndef run(x, out):\n    _S.v = out"],
    "monkey-patch": ["import time\ntime.perf_counter = lambda: 0.0", "import torch\ntorch.cuda.synchronize = print",
                     "import torch\nsetattr(torch.cuda.Event, 'elapsed_time', f)",
                     "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True",
                     "import torch\ntorch.set_float32_matmul_precision('medium')"],
    "host-compute": ["import numpy as np", "def run(x, out):\n    y = x.cpu()", "def run(x, out):\n    y = x.tolist()",
                     "def run(x, out):\n    y = x.to('cpu')",
                     ("import torch\ndef run(x, out):\n    y = torch.empty(3, device='cpu')")],
    "file-access": ["def run(x, out):\n    open('/etc/passwd').read()", "P = '../../sdk/definitions/x.json'",
                    "import os\np = os.environ['FIB_DATASET_PATH']", "p = 'data/workloads/x.jsonl'",
                    # joined onto the package's own path, but absolute or computed: the judge's /proc/<pid>/mem
                    ("import os\ndef f(pid):\n    return open(os.path.join(os.path.dirname(__file__), "
                     "os.path.join(os.sep, 'proc', str(pid), 'mem')), 'r+b')"),
                    "import os\nP = os.path.join(os.path.dirname(__file__), os.sep + 'proc')\nf = open(P)",
                    "from pathlib import Path\nf = open(Path(__file__).parent / name)",
                    "from pathlib import Path\nf = open(Path(__file__).parent.parent.parent.parent / 'sdk' / 'x.py')",
                    "import os\nf = open(os.path.join(os.path.dirname(__file__), '..', 'x'))",
                    "from pathlib import Path\nf = open(Path(__file__).parent.joinpath('/etc/passwd'))"],
    "process": ["import os\nos.system('ls')", "import os\nos._exit(0)", "import os\nparent = os.getppid()"],
    "suspicious-string": ["m = getattr(torch.cuda, 'synchronize')", "name = 'ctypes'"],
    "declared-cache": ["FIB_DECLARED_CACHE = 'shape tables'\n_T = {}\ndef run(x, out):\n    _T[1] = 2"],
}
NATIVE = {
    "cuda-stream": "cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);",
    "host-thread": "std::thread worker([]{});",
    "global-state": "static std::unordered_map<const void*, at::Tensor> cache;",
    "monkey-patch": "auto real = dlsym(RTLD_NEXT, \"cudaEventElapsedTime\");",
    "file-access": "FILE* f = fopen(\"/tmp/x\", \"r\");",
}


@pytest.mark.parametrize("rule,snippet", [(r, s) for r, snippets in CAUGHT.items() for s in snippets])
def test_python_rules(rule, snippet):
    assert rule in rules(snippet), (rule, snippet, rules(snippet))


@pytest.mark.parametrize("rule,snippet", sorted(NATIVE.items()))
def test_native_rules_in_cuda_files_and_inline_sources(rule, snippet):
    assert rule in rules(snippet, "kernel.cu")
    inline = f'import torch\nSRC = """\n__global__ void k() {{}}\n{snippet}\n"""\n'
    assert rule in rules(inline)


ALLOWED = [
    # lazily compiled extensions, kept for the process: the honest solutions' pattern
    "_EXT = None\ndef _ext():\n    global _EXT\n    if _EXT is None:\n        _EXT = load()\n    return _EXT",
    "import functools\n@functools.lru_cache(maxsize=None)\ndef _kernels():\n    return load()",
    # alignment tests on pointers, host syncs on local values, writes into the outputs
    "def run(x, out):\n    if x.data_ptr() % 16 == 0:\n        pass\n    n = x.shape[0]\n    out[:n] = 0",
    "import torch\ndef run(x, out):\n    counts = torch.bincount(x).tolist()",
    "def run(x, out):\n    value = float(x)\n    out.copy_(x)",
    # reading the package's own files, comments and docstrings that mention forbidden names
    "from pathlib import Path\nHERE = Path(__file__).parent\ndef src():\n    return open(HERE / 'k.cu').read()",
    "from pathlib import Path\nHERE = Path(__file__).resolve().parent\nf = open(HERE.joinpath('kernels', 'k.cu'))",
    "import os\nHERE = os.path.dirname(os.path.abspath(__file__))\nf = open(os.path.join(HERE, 'k.cu'))",
    "from pathlib import Path\nROOT = Path(__file__).parent.parent.parent\nf = open(ROOT / 'config.toml')",
    '"""Not threading, not ctypes, no data_ptr caches."""\n# import ctypes\nimport torch',
    # a declared cache with its clear function
    ("FIB_DECLARED_CACHE = 'ramps per shape'\n_R = {}\ndef fib_cache_clear():\n    _R.clear()\n"
     "def run(x, out):\n    _R[x.shape] = 1"),
]


@pytest.mark.parametrize("snippet", ALLOWED)
def test_honest_patterns_pass(snippet):
    assert rules(snippet) == set(), snippet


def test_comments_in_native_code_are_ignored_and_a_syntax_error_is_left_to_the_build():
    assert rules("// std::thread t; cudaStreamCreate(&s);\n/* dlsym(RTLD_NEXT, x) */\n", "k.cuh") == set()
    assert rules("def run(:\n    import ctypes\n") == set()  # COMPILE_ERROR reports it


def test_every_solution_and_template_in_the_repository_scans_clean():
    for package in solutions.discover(ROOT / "solutions"):
        assert scan_sources((s.path, s.content) for s in package.solution.sources) == [], package.name
    sources = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "templates").rglob("*"))
               if p.suffix in {".py", ".cu", ".cuh", ".h", ".cpp", ".j2"} and p.is_file()]
    found = scan_sources((path.removesuffix(".j2"), text) for path, text in sources)
    assert found == [], [str(f) for f in found]


def test_reason_names_the_first_finding_and_counts_the_rest():
    findings = [Finding("pointer-key", "main.py", 7, "uses .data_ptr"), Finding("global-state", "main.py", 9, "x")]
    assert reason(findings) == "static scan: pointer-key at main.py:7: uses .data_ptr (+1 more)"
