"""Write the API reference pages ``docs/api/<package>.md`` from the export lists.

Run from the repository root after adding, removing or renaming an export::

    PYTHONPATH=src python docs/api_pages.py

Each public subpackage (or module) of ``shardkit`` gets one page: its docstring, then
its ``__all__`` grouped into functions, classes, exceptions and constants. Functions
and classes are documented by autodoc from their docstrings; constants and type
aliases, whose docstrings autodoc cannot find through a re-export, are written as
``py:data`` entries with their value and the string literal that follows their
assignment in the source. ``docs/api/shardkit.md`` (the top level) and
``docs/api/index.md`` are written by hand. ``tests/test_docs.py`` fails when a page
and an export list disagree.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import sys
import typing
from pathlib import Path

import shardkit

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "api"
SOURCE = ROOT / "src" / "shardkit"

TITLES = {
    "layout": "Meshes, specs and placement",
    "show": "Pictures of shardings",
    "inspect": "Communication reports and the cost model",
    "linalg": "Linear algebra",
    "fft": "Distributed FFT",
    "plan": "Sharding planner",
    "random": "Random numbers",
    "train": "Training recipes",
    "distributed": "Multi-process jobs",
    "bench": "Benchmarks",
    "testing": "Testing helpers",
    "examples": "The tour's scenarios",
}
# Type aliases defined without a docstring of their own.
DESCRIPTIONS = {
    (
        "linalg",
        "Algorithm",
    ): "The ``algorithm=`` values of :func:`shardkit.linalg.matmul` (a ``Literal`` type).",
    ("linalg", "Order"): "The ``order=`` values of the block-cyclic layout (a ``Literal`` type).",
}
GROUPS = (
    ("function", "Functions"),
    ("class", "Classes"),
    ("exception", "Exceptions"),
    ("data", "Constants and types"),
)


def public_modules() -> list[str]:
    """Every public subpackage or module; ``cli`` is the command line, not an API."""
    names = [m.name for m in pkgutil.iter_modules(shardkit.__path__) if m.name[0] != "_"]
    return [n for n in names if n != "cli"]


def attribute_docs(name: str) -> dict[str, str]:
    """``{variable: docstring}`` for the string literals after assignments in ``name``."""
    path = SOURCE / name
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    docs: dict[str, str] = {}
    for file in files:
        body = ast.parse(file.read_text()).body
        for node, after in itertools.pairwise(body):
            target = (
                node.targets[0]
                if isinstance(node, ast.Assign)
                else node.target
                if isinstance(node, ast.AnnAssign)
                else None
            )
            if (
                isinstance(target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[target.id] = " ".join(after.value.value.split())
    return docs


def kind(obj: object) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj) and typing.get_origin(obj) is None:
        return "function"
    return "data"


def value(obj: object) -> str:
    if typing.get_origin(obj) is typing.Literal:
        return "Literal[" + ", ".join(map(repr, typing.get_args(obj))) + "]"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k!r}: ..." for k in obj) + "}"
    return repr(obj)


def page(name: str) -> str:
    importlib.import_module(f"shardkit.{name}")
    module = sys.modules[f"shardkit.{name}"]
    docs = attribute_docs(name)
    groups: dict[str, list[str]] = {key: [] for key, _ in GROUPS}
    for export in module.__all__:
        groups[kind(getattr(module, export))].append(export)
    title = TITLES.get(name) or (module.__doc__ or name).strip().splitlines()[0].rstrip(".")
    out = [f"# `shardkit.{name}`: {title}", ""]
    out += ["```{eval-rst}", f".. automodule:: shardkit.{name}", "   :no-members:", "```", ""]
    for key, heading in GROUPS:
        if not groups[key]:
            continue
        # py:data takes the full dotted name as written, not under automodule's module
        lines = [".. py:currentmodule:: None", ""] if key == "data" else []
        for export in groups[key]:
            full = f"shardkit.{name}.{export}"
            if key == "function":
                lines += [f".. autofunction:: {full}", ""]
            elif key in ("class", "exception"):
                lines += [f".. auto{key}:: {full}", "   :members:", ""]
            else:
                obj = getattr(module, export)
                text = DESCRIPTIONS.get((name, export)) or docs.get(export)
                if text is None and typing.get_origin(obj) is typing.Literal:
                    text = "The accepted values (a ``Literal`` type)."
                if text is None:
                    raise SystemExit(
                        f"{full} has no docstring: write a string literal on the line "
                        "after its assignment"
                    )
                lines += [f".. py:data:: {full}", f"   :value: {value(obj)}", "", f"   {text}", ""]
        out += [f"## {heading}", "", "```{eval-rst}", *lines[:-1], "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    for name in public_modules():
        path = PAGES / f"{name}.md"
        text = page(name)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
