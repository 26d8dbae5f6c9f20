import os

import pytest

from sdk import definitions, solutions
from sdk._fib import Solution
from sdk.errors import BadInputError
from tests.helpers import INDEXER, write_package

OK = "def run(q, k, w, lens, table, out):\n    out.fill_(-1)\n"


def test_shipped_packages_load_as_flashinfer_bench_solutions():
    packages = solutions.discover()
    assert {p.solution.definition for p in packages} >= set(definitions.names())
    for p in packages:
        assert isinstance(p.solution, Solution)
        assert p.solution.spec.entry_point == "main.py::run"
        assert Solution.model_validate_json(p.solution.model_dump_json()).hash() == p.solution.hash()


def test_build_imports_entry_and_checks_arity(tmp_path):
    pkg = solutions.load_package(write_package(tmp_path / "a", INDEXER, OK))
    assert callable(solutions.build(pkg.solution, definitions.load(INDEXER)))
    bad = solutions.load_package(write_package(tmp_path / "b", INDEXER, "def run(a, b):\n    pass\n"))
    with pytest.raises(BadInputError, match="6 positional arguments"):
        solutions.build(bad.solution, definitions.load(INDEXER))
    missing = solutions.load_package(write_package(tmp_path / "c", INDEXER, "def other():\n    pass\n"))
    with pytest.raises(BadInputError, match="not a callable"):
        solutions.build(missing.solution, definitions.load(INDEXER))
    value_style = solutions.load_package(write_package(tmp_path / "d", INDEXER, "def run(a, b, c, d, e):\n    pass\n",
                                                       destination_passing_style=False))
    assert callable(solutions.build(value_style.solution, definitions.load(INDEXER)))


@pytest.mark.parametrize("config,match", [
    ("[solution\nname=1", "malformed TOML"),
    ('[solution]\nname="x"\ndefinition="d"\nauthor="a"\n', r"missing \[build\]"),
    ('[solution]\nname="x"\ndefinition="d"\nauthor="a"\nextra=1\n[build]\n', "unknown key"),
    ('[solution]\nname=""\ndefinition="d"\nauthor="a"\n[build]\n', "non-empty"),
    ('[solution]\nname="x"\ndefinition="d"\nauthor="a"\n[build]\nentry_point="main.py"\n', "invalid solution"),
    ('[solution]\nname="x"\ndefinition="d"\nauthor="a"\n[build]\nsource_dir="../../etc"\n', "inside"),
])
def test_malformed_config(tmp_path, config, match):
    write_package(tmp_path, INDEXER, OK)
    (tmp_path / "config.toml").write_text(config)
    with pytest.raises(BadInputError, match=match):
        solutions.load_package(tmp_path)


def test_sources_must_be_flat_text_without_links(tmp_path):
    src = write_package(tmp_path / "p", INDEXER, OK) / "solution" / "python"
    (src / "sub").mkdir()
    with pytest.raises(BadInputError, match="flat"):
        solutions.load_package(tmp_path / "p")
    os.rmdir(src / "sub")
    (src / "kernel.so").write_bytes(b"\x7fELF")
    with pytest.raises(BadInputError, match="suffix"):
        solutions.load_package(tmp_path / "p")
    os.remove(src / "kernel.so")
    (src / "blob.cu").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(BadInputError, match="UTF-8"):
        solutions.load_package(tmp_path / "p")
    os.remove(src / "blob.cu")
    os.symlink("/etc/passwd", src / "leak.py")
    with pytest.raises(BadInputError, match="symlink"):
        solutions.load_package(tmp_path / "p")
    os.remove(src / "leak.py")
    (src / "huge.py").write_text("#" * (solutions.MAX_SOURCE_BYTES + 1))
    with pytest.raises(BadInputError, match="limit"):
        solutions.load_package(tmp_path / "p")


def test_solution_for_another_definition_is_refused(tmp_path):
    pkg = solutions.load_package(write_package(tmp_path, INDEXER, OK))
    with pytest.raises(BadInputError, match="solves"):
        solutions.build(pkg.solution, definitions.load(definitions.names()[0]))
