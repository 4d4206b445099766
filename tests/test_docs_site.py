"""``docs/check_site.py`` finds each kind of breakage it promises, on a small site.

The check opens pages in Chromium, the OS package; without it this test skips, unless
``$CI`` is set (``.ci/run`` installs the browser and sets it), where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "check_site.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_site", _SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


check_site = _load()

_ICON = '<link rel="icon" href="/icon.svg">'
_PIXEL = '<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"></svg>'
_SITE = {
    "index.html": f"""<html><head>{_ICON}</head><body>
      <a href="good.html">fine</a> <a href="good.html#there">fine anchor</a>
      <a href="good.html#nowhere">bad anchor</a> <a href="gone.html">bad page</a>
      <a href="https://example.org/">external, not followed</a>
      <img src="pixel.svg"> <img src="missing.png">
      <script>console.error("boom")</script>
      <script src="http://example.invalid/x.js"></script></body></html>""",
    "good.html": f"<html><head>{_ICON}</head><body><h1 id='there'>t</h1></body></html>",
    "no_icon.html": "<html><body>the browser asks for /favicon.ico</body></html>",
    "guides/plain.html": f"""<html><head>{_ICON}</head><body>
      <svg></svg><div class="cell_output"><pre>text only</pre></div></body></html>""",
    "guides/drawn.html": f"""<html><head>{_ICON}</head><body>
      <div class="cell_output"><img src="../pixel.svg"></div></body></html>""",
    "pixel.svg": _PIXEL,
    "icon.svg": _PIXEL,
}


@pytest.fixture(scope="module")
def chromium() -> str:
    found = check_site.find_chromium()
    if found is None or importlib.util.find_spec("playwright") is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set, but Chromium or Playwright is missing (see .ci/run)")
        pytest.skip("no Chromium (apt-get install -y chromium) or no Playwright")
    return found


def test_every_kind_of_breakage_is_reported_and_nothing_else(tmp_path: Path, chromium: str) -> None:
    for name, text in _SITE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = check_site.check_site(tmp_path, chromium)
    assert sorted(report.pages) == [
        "good.html",
        "guides/drawn.html",
        "guides/plain.html",
        "index.html",
        "no_icon.html",
    ]

    def problems(page: str) -> str:
        return "\n".join(p for p in report.problems if p.startswith(f"{page}: "))

    index = problems("index.html")
    for expected in (
        "console error: boom",
        "HTTP 404: http://127.0.0.1:",
        "image does not load: http://127.0.0.1:",
        "request leaves the machine: http://example.invalid/x.js",
        "link good.html#nowhere: good.html has no element with id 'nowhere'",
        "link gone.html: no file gone.html",
    ):
        assert expected in index, f"{expected!r} not in:\n{index}"
    assert "#there" not in index
    assert "example.org" not in index
    assert "(the page's icon)" in problems("no_icon.html")
    assert problems("guides/plain.html").endswith(
        "a guide whose outputs hold no picture (img, svg or canvas)"
    )
    assert problems("good.html") == problems("guides/drawn.html") == ""
    assert "5 pages, 4 internal links (2 with an anchor), 3 images" in report.summary()


def test_without_a_browser_it_skips_outside_ci_and_fails_in_it_or_without_playwright(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "index.html").write_text("<html></html>")
    monkeypatch.setattr(check_site, "find_chromium", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    assert check_site.main([str(tmp_path)]) == 0
    assert "SKIPPED" in capsys.readouterr().out
    monkeypatch.setenv("CI", "1")
    assert check_site.main([str(tmp_path)]) == 2
    assert "CI is set" in capsys.readouterr().out
    monkeypatch.setattr(check_site, "find_chromium", lambda: "chromium")
    monkeypatch.setattr(check_site.importlib.util, "find_spec", lambda name: None)
    assert check_site.main([str(tmp_path)]) == 2
    assert "Playwright is missing" in capsys.readouterr().out
    assert check_site.main([str(tmp_path / "nothing")]) == 2
    assert "build the site first" in capsys.readouterr().out
