"""The tests' own layout: they mirror src, and build their meshes through one helper.

Like ``test_boundaries.py`` the checks read the test files with ``ast`` (nothing is
imported), so they are fast. Two rules (CONTRIBUTING, "How the code is laid out"):

- A package's tests live in its folder (``tests/linalg`` for ``shardkit.linalg``);
  the top of ``tests/`` holds the tests of the top-level modules (``test_cli.py`` for
  ``shardkit/cli.py``, ``test_validation_random.py`` for ``shardkit/random.py``) and
  the project-wide ones listed in ``PROJECT_WIDE``.
- A test builds a mesh only through ``tests/_meshes.py``'s ``make_mesh``: a call to
  ``shardkit.mesh``, ``jax.make_mesh``, ``jax.sharding.Mesh`` or ``AbstractMesh``
  elsewhere fails, except in the files of ``MESH_BUILDERS``, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src" / "shardkit"

# Top-level test files that test the project as a whole rather than one module.
PROJECT_WIDE = {
    "test_api.py": "every package's export list and docstrings",
    "test_boundaries.py": "the import boundaries between src's packages",
    "test_concurrency.py": "solve, fftn, matmul and comms from several threads at once",
    "test_contract.py": "the contract battery over every public distributed function",
    "test_docs.py": "the docs' sources and their API pages",
    "test_docs_site.py": "the built docs site",
    "test_packaging.py": "the package's metadata and wheel",
    "test_test_layout.py": "this file: the tests' own layout",
}

# Files that build meshes themselves, and why.
MESH_BUILDERS = {
    "_meshes.py": "the helper itself",
    "layout/test_mesh.py": "tests shardkit.mesh itself",
    "layout/test_validation_layout.py": "tests shardkit.mesh's argument checks",
    "distributed/_worker.py": "runs in launched processes, with each rank's global devices",
    "train/_two_process.py": "runs in launched processes, with each rank's global devices",
}

MESH_CALLS = {"mesh", "make_mesh", "Mesh", "AbstractMesh"}


def _mesh_names(tree: ast.Module) -> set[str]:
    """Bare names bound to a mesh constructor by ``from ... import``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "jax",
            "shardkit",
        ):
            for alias in node.names:
                if alias.name in MESH_CALLS:
                    out.add(alias.asname or alias.name)
    return out


def direct_meshes(source: str) -> list[int]:
    """The lines of ``source`` that build a mesh without the shared helper.

    Caught: ``shardkit.mesh(...)`` (and through ``layout``), ``jax.make_mesh(...)``,
    ``jax.sharding.Mesh(...)``, ``Mesh(...)``/``AbstractMesh(...)`` and a ``mesh``
    or ``make_mesh`` imported from jax or shardkit. ``make_mesh`` from ``_meshes`` is
    the helper.
    """
    tree = ast.parse(source)
    bare = _mesh_names(tree)
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name):
            hit = f.id in bare or f.id in ("Mesh", "AbstractMesh")
        elif isinstance(f, ast.Attribute):
            root = f.value
            while isinstance(root, ast.Attribute):
                root = root.value
            owner = root.id if isinstance(root, ast.Name) else ""
            hit = f.attr in MESH_CALLS and owner in ("jax", "shardkit", "layout", "sharding")
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return sorted(lines)


def test_tests_build_meshes_through_the_shared_helper() -> None:
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        if name in MESH_BUILDERS or "golden" in path.parts:
            continue
        lines = direct_meshes(path.read_text())
        if lines:
            found[name] = lines
    assert not found, (
        f"these tests build meshes directly (file: lines): {found}; use "
        "make_mesh from tests/_meshes.py (names=, devices= and a Mapping of names per rank "
        "cover the usual needs), or add the file to MESH_BUILDERS with the reason"
    )


def test_mesh_builders_exist() -> None:
    assert [n for n in MESH_BUILDERS if not (TESTS / n).is_file()] == []


def test_checker_finds_planted_meshes() -> None:
    planted = """
import jax
import shardkit
from jax.sharding import Mesh as M
from shardkit.layout import mesh
from _meshes import make_mesh

a = shardkit.mesh("8")
b = jax.make_mesh((8,), ("x",))
c = jax.sharding.Mesh(jax.devices(), ("x",))
d = M(jax.devices(), ("x",))
e = mesh("8")
f = shardkit.layout.mesh("8")
ok = make_mesh("8")
"""
    assert direct_meshes(planted) == [8, 9, 10, 11, 12, 13]


def test_top_level_tests_mirror_top_level_modules() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem.lstrip("_") for p in SRC.glob("*.py") if p.stem != "__init__"}
    misplaced = []
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name in PROJECT_WIDE:
            continue
        stem = path.stem.removeprefix("test_").removeprefix("validation_")
        if stem in packages or stem not in modules:
            misplaced.append(path.name)
    assert not misplaced, (
        f"{misplaced}: a package's tests go into its folder (tests/<package>/), the top of "
        "tests/ holds those of src/shardkit's top-level modules; a project-wide test goes "
        "into PROJECT_WIDE with what it covers"
    )
    for folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
        assert folder.name in packages, f"tests/{folder.name}/ mirrors no package of src/shardkit"
