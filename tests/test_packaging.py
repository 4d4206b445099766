"""What ships with the package: license, type marker, and a README that stays inside."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def local_links(markdown: str) -> list[str]:
    """Targets of Markdown links that are not web addresses or anchors."""
    return [t for t in _LINK.findall(markdown) if not re.match(r"[a-z]+:|#", t)]


def test_local_links_finds_relative_targets_only() -> None:
    text = "[a](docs/x.md) [b](https://example.org) [c](#top) [d](../outside.md)"
    assert local_links(text) == ["docs/x.md", "../outside.md"]


def test_readme_links_only_files_inside_the_repository() -> None:
    for doc in ("README.md", "CONTRIBUTING.md"):
        for target in local_links((ROOT / doc).read_text()):
            path = (ROOT / target.split("#")[0]).resolve()
            assert path.is_relative_to(ROOT), f"{doc} links {target}, outside the repository"
            assert path.exists(), f"{doc} links {target}, which does not exist"


def test_license_file_is_declared_and_matches_the_license_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert "Typing :: Typed" in project["classifiers"]


def test_package_is_marked_typed() -> None:
    assert (ROOT / "src" / "shardkit" / "py.typed").is_file()


def test_readme_names_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    readme = (ROOT / "README.md").read_text()
    for extra in extras:
        assert f"| `{extra}` |" in readme, f"README's install table lacks the {extra} extra"
