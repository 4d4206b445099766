"""Output paths and optional extras are checked before long work starts."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from shardkit._preflight import check_output_dir, check_output_file, require
from shardkit._progress import busy


def test_output_file_needs_an_existing_folder(tmp_path: Path) -> None:
    assert check_output_file(tmp_path / "a.png", what="--plot") == tmp_path / "a.png"
    with pytest.raises(ValueError, match=r"--plot '.*missing/a.png': the folder .* does not"):
        check_output_file(tmp_path / "missing" / "a.png", what="--plot")
    with pytest.raises(ValueError, match="is a directory; give a file name inside it"):
        check_output_file(tmp_path, what="--plot")


def test_output_dir_may_be_missing_but_not_a_file(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    assert check_output_dir(nested, what="--out") == nested
    assert not nested.exists()  # checked, not created
    taken = tmp_path / "taken"
    taken.write_text("")
    for bad in (taken, taken / "below"):
        with pytest.raises(ValueError, match=r"--out .*is an existing file, not a folder"):
            check_output_dir(bad, what="--out")


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(
        ImportError, match=r"plots needs matplotlib.*pip install 'shardkit\[bench\]'"
    ):
        require("matplotlib", extra="bench", what="plots")


def test_busy_spins_on_a_terminal_and_prints_one_line_elsewhere() -> None:
    plain = Console(file=io.StringIO())
    with busy(plain, "compiling"):
        plain.print("done")
    assert plain.file.getvalue() == "compiling ...\ndone\n"  # type: ignore[attr-defined]
    term = Console(file=io.StringIO(), force_terminal=True)
    with busy(term, "compiling"):
        pass
    assert "compiling" in term.file.getvalue()  # type: ignore[attr-defined]
    with busy(None, "nothing shown"):
        pass
