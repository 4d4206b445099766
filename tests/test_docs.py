"""The documentation site's API reference covers every export (no Sphinx run here).

``make docs`` fails on a warning, but it cannot notice an export that no page
mentions; this test does, in a second, from the pages' text.
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import shardkit

API = Path(__file__).resolve().parent.parent / "docs" / "api"
# Every public module of the package (bench is not re-exported at the top but is public;
# cli is the command line, documented by `shardkit --help`, not an API).
SUBPACKAGES = sorted(
    m.name for m in pkgutil.iter_modules(shardkit.__path__) if not m.name.startswith("_")
)
SUBPACKAGES.remove("cli")

_DIRECTIVE = re.compile(r"^\s*\.\. (?:auto\w+|py:\w+):: (shardkit(?:\.\w+)+)\s*$", re.MULTILINE)


def subpackage(name: str) -> ModuleType:
    importlib.import_module(f"shardkit.{name}")
    return sys.modules[f"shardkit.{name}"]


def documented(text: str) -> set[str]:
    """Dotted names a page documents: the targets of its autodoc and py directives."""
    return set(_DIRECTIVE.findall(text))


def _all_documented() -> set[str]:
    return {n for page in API.glob("*.md") for n in _DIRECTIVE.findall(page.read_text())}


def test_the_page_reader_sees_a_missing_name() -> None:
    page = ".. autofunction:: shardkit.fft.fftn\n\n.. py:data:: shardkit.X\n   :value: 1\n"
    assert documented(page) == {"shardkit.fft.fftn", "shardkit.X"}
    assert "shardkit.fft.ifftn" not in documented(page)
    # a mention in prose is not an entry
    assert documented("See :func:`shardkit.fft.ifftn`.\n") == set()


@pytest.mark.parametrize("name", sorted(SUBPACKAGES))
def test_every_export_of_a_subpackage_has_an_entry_on_its_page(name: str) -> None:
    module = subpackage(name)
    page = API / f"{name}.md"
    assert page.exists(), f"{module.__name__} has no page {page}"
    text = page.read_text()
    assert f".. automodule:: {module.__name__}" in text
    missing = {f"{module.__name__}.{n}" for n in module.__all__} - documented(text)
    assert not missing, (
        f"{page.name} does not document {sorted(missing)}; run PYTHONPATH=src python docs/api_pages.py"
    )
    index = (API / "index.md").read_text()
    assert re.search(rf"^{name}$", index, re.MULTILINE), f"{name}.md is not in api/index.md"


def test_every_top_level_export_is_documented_or_links_its_page() -> None:
    text = (API / "shardkit.md").read_text()
    names = documented(text)
    for name in shardkit.__all__:
        if isinstance(getattr(shardkit, name), ModuleType):
            assert f"[{name}" in text.lower() or f"`shardkit.{name}`" in text, name
            continue
        assert f"shardkit.{name}" in names, f"shardkit.{name} is not in api/shardkit.md"


def test_no_page_documents_a_name_that_is_not_exported() -> None:
    for qualified in _all_documented():
        parts = qualified.split(".")
        if len(parts) == 2:
            assert parts[1] in shardkit.__all__ or parts[1] in SUBPACKAGES, qualified
        else:
            assert parts[2] in subpackage(parts[1]).__all__, qualified


@pytest.mark.parametrize("name", sorted(SUBPACKAGES))
def test_exported_exceptions_live_at_their_public_path(name: str) -> None:
    module = subpackage(name)
    for export in module.__all__:
        obj = getattr(module, export)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert obj.__module__ == module.__name__, f"{obj.__module__}.{obj.__qualname__}"
            # reprs, tracebacks and pickles name the public path, and it imports back
            assert getattr(sys.modules[obj.__module__], obj.__qualname__) is obj


def test_a_linalg_error_pickles_and_names_its_public_path() -> None:
    error = shardkit.linalg.SingularMatrixError("solve", 3, "singular")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is shardkit.linalg.SingularMatrixError
    assert repr(type(error)) == "<class 'shardkit.linalg.SingularMatrixError'>"
