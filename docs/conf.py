"""Sphinx configuration for shardkit's documentation (``make docs``).

Guides are MyST Markdown notebooks (jupytext's ``myst`` format) executed at build
time on 8 simulated CPU devices; the API reference is generated from the docstrings.
The build runs with ``-W --keep-going``: any warning (a broken reference, an export
missing from the reference, a cell that raises or writes to stderr) fails it.

Links into JAX's and NumPy's documentation (intersphinx) are left out on purpose:
intersphinx downloads their inventories at every build, and without a network it
warns, which fails this strict build. Names from those libraries appear unlinked.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import pkgutil
import sys
from pathlib import Path
from typing import Any

project = "shardkit"
author = "the shardkit authors"
copyright = "the shardkit authors"
release = importlib.metadata.version("shardkit")
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# ---- API reference ----------------------------------------------------------------
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" become fields of their class, so dataclass fields are not described twice
napoleon_use_ivar = True
add_module_names = False
# Every cross-reference must resolve, except the names listed here.
nitpicky = True
nitpick_ignore_regex = [
    # JAX, NumPy, rich and the standard library: no intersphinx (see above)
    (r"py:.*", r"(jax|jaxlib|numpy|rich|collections|pathlib|os|signal|typing|optax)(\..+)?"),
    # private helpers that appear in public signatures
    (r"py:.*", r"shardkit(\.\w+)*\._\w+(\..+)?"),
    (r"py:class", r"shardkit\.train\.models\.Hooks"),
    # unqualified names from string annotations that autodoc cannot resolve
    (
        r"py:class",
        r"Mesh|Layout|OutLayout|CollectiveAlgorithm|Console|AxisTypeLike|PyTree|JSONObject",
    ),
    # submodules are documented through their package's page
    (r"py:mod", r"shardkit\.\w+\.\w+"),
]


def _optax_for_type_hints() -> None:
    """Let autodoc resolve the train package's optax annotations.

    The train modules import optax for type checking only (it is an optional extra,
    imported when a step is built); without the name, autodoc cannot evaluate any of a
    function's hints and shows them as unresolvable strings.
    """
    import optax

    for name in ("_muon", "_step", "_strategies"):
        module = importlib.import_module(f"shardkit.train.{name}")
        module.optax = optax  # type: ignore[attr-defined]


_optax_for_type_hints()


def _dataclass_fields() -> list[str]:
    """Field names of the exported dataclasses (documented as ``:ivar:`` fields)."""
    import shardkit

    fields: set[str] = set()
    for info in pkgutil.iter_modules(shardkit.__path__):
        if info.name.startswith("_") or info.name == "cli":
            continue
        importlib.import_module(f"shardkit.{info.name}")
        module = sys.modules[f"shardkit.{info.name}"]
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                fields |= {f.name for f in dataclasses.fields(obj)}
    return sorted(fields)


# Napoleon writes dataclass fields as :ivar: fields of their class (so they are not
# described twice), which gives ":attr:`Step.block`"-style references no target.
nitpick_ignore_regex.append((r"py:attr", rf"(\w+\.)*({'|'.join(_dataclass_fields())})"))
python_use_unqualified_type_names = True

# ---- notebooks --------------------------------------------------------------------
nb_execution_mode = "cache"
nb_execution_cache_path = str(Path(__file__).parent / "_build" / ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_output_stderr = "warn"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# ---- HTML -------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = f"shardkit {release}"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "use_download_button": True,
}
# Without a default mode the theme's script logs "Got invalid theme mode: . Resetting to
# auto." on every page a fresh browser opens.
html_context = {"default_mode": "auto"}
# Without an icon every page makes the browser request /favicon.ico, a 404.
html_favicon = "favicon.svg"
html_static_path: list[str] = []


def _drop_modules_without_source(app: Any, *args: Any) -> list[tuple[str, dict[str, Any], str]]:
    """Keep viewcode's module index to the pages it writes.

    viewcode lists every module a documented object names as its home in
    ``_modules/index.html`` (``builtins`` among them here) but writes pages only for
    those whose source it found, so the index linked to a page that does not exist. It runs at the default
    priority (500); this handler, at 400, removes those entries before it.
    """
    modules = getattr(app.env, "_viewcode_modules", {})
    for name in [name for name, entry in modules.items() if not entry]:
        del modules[name]
    return []


def setup(app: Any) -> None:
    app.connect("html-collect-pages", _drop_modules_without_source, priority=400)
