"""Open every page of the built documentation site in Chromium and report what is broken.

Run after the build (``make docs`` does)::

    .venv/bin/python docs/check_site.py docs/_build/html

It serves the site on a free local port and opens each page in a fresh browser
context of Chromium (the OS package, driven by Playwright), then fails, listing every
problem, on:

- a console error or warning, or an uncaught exception, on any page;
- a request that fails or answers 400 or more (a 404 for a theme asset, say), or
  one that leaves this machine (the site must work offline);
- a broken internal link: its page or file is missing, or its ``#anchor`` names no
  element of the target page;
- an image that does not load;
- a guide (``guides/*``) whose executed outputs hold no picture (an ``img``, ``svg``
  or ``canvas`` in an output cell);
- a search page that finds nothing for a word every page contains.

The browser is the ``chromium`` on ``PATH`` (or ``$CHROMIUM``); Playwright never
downloads one. Without it the check says so and exits 0, unless ``$CI`` is set, where a
missing browser is an error (``.ci/run`` installs the package).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import importlib.util
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urldefrag, urlsplit

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Request, Response, Route

# Element ids of a page (the targets of its #anchors), every link target, and the
# images that fail to load (decode() rejects for a broken one; lazy ones load first).
_IDS_JS = """() => [...document.querySelectorAll('[id]')].map(e => e.id)
    .concat([...document.querySelectorAll('a[name]')].map(e => e.name))"""
_LINKS_JS = "() => [...document.querySelectorAll('a[href]')].map(a => a.href)"
_BROKEN_IMAGES_JS = """async () => {
  const imgs = [...document.images];
  imgs.forEach(i => { i.loading = 'eager'; });
  const bad = await Promise.all(imgs.map(i => i.decode().then(() => null, () => i.src)));
  return [imgs.length, bad.filter(s => s !== null)];
}"""
_PICTURES_JS = """() => document.querySelectorAll(
  '.cell_output img, .cell_output svg, .cell_output canvas').length"""
# The icon a browser asks for: the page's <link rel="icon">, else /favicon.ico.
_ICON_JS = """() => (document.querySelector('link[rel~="icon"]') ||
  {href: new URL('/favicon.ico', location.href).href}).href"""
_SEARCH_WORD = "shardkit"
_SEARCH_RESULTS = "#search-results ul.search li"


@dataclass
class Page:
    """What one page showed: its anchors, links, images and pictures, and its problems."""

    path: str
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    images: int = 0
    pictures: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The whole site's result: pages, counts, and each problem prefixed by its page."""

    pages: dict[str, Page]
    links: int
    anchors: int
    problems: list[str]

    @property
    def images(self) -> int:
        return sum(p.images for p in self.pages.values())

    def summary(self) -> str:
        guides = [p for p in self.pages.values() if _is_guide(p.path)]
        pictures = sum(p.pictures for p in guides)
        return (
            f"{len(self.pages)} pages, {self.links} internal links ({self.anchors} with an "
            f"anchor), {self.images} images, {pictures} pictures in the outputs of "
            f"{len(guides)} guides: {len(self.problems)} problems"
        )


def _is_guide(path: str) -> bool:
    return path.startswith("guides/") and path.endswith(".html")


def find_chromium() -> str | None:
    """The Chromium executable: ``$CHROMIUM``, else ``chromium`` on ``PATH``."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return shutil.which("chromium") or shutil.which("chromium-browser")


def site_pages(root: Path) -> list[str]:
    """Every HTML page of the site, relative to ``root`` (theme templates left out)."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.html")
        if p.relative_to(root).parts[0] != "_static"
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        # The browser may drop a connection it no longer needs (a page left while a
        # picture loads): a broken pipe there is no problem of the site's.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on a free port of 127.0.0.1; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _target(url: str, base: str) -> tuple[str, str] | None:
    """``(path relative to the site, anchor)`` of an internal URL; ``None`` if external."""
    if not url.startswith(base):
        return None
    bare, anchor = urldefrag(url)
    path = unquote(urlsplit(bare).path)[len(urlsplit(base).path) :]
    if path == "" or path.endswith("/"):
        path += "index.html"
    return str(PurePosixPath(path)), unquote(anchor)


def _visit(browser: Browser, base: str, path: str) -> Page:
    """Open ``path`` in a fresh context (no stored theme mode, an empty cache)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    result = Page(path)
    problems = result.problems

    def route(route: Route) -> None:
        if route.request.url.startswith((base, "data:")):
            route.continue_()
        else:
            problems.append(f"request leaves the machine: {route.request.url}")
            route.abort()

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            problems.append(f"console {message.type}: {message.text}")

    def failed(request: Request) -> None:
        if request.url.startswith(base):
            problems.append(f"request failed ({request.failure}): {request.url}")

    def response(response: Response) -> None:
        if response.status >= 400:
            problems.append(f"HTTP {response.status}: {response.url}")

    context = browser.new_context()
    try:
        context.route("**/*", route)
        page = context.new_page()
        page.on("console", console)
        page.on("pageerror", lambda error: problems.append(f"uncaught exception: {error}"))
        page.on("requestfailed", failed)
        page.on("response", response)
        page.goto(base + path, wait_until="load")
        # A headless browser skips the icon a windowed one asks for: ask for it here.
        icon = context.request.get(page.evaluate(_ICON_JS))
        if icon.status >= 400:
            problems.append(f"HTTP {icon.status}: {icon.url} (the page's icon)")
        result.ids = set(page.evaluate(_IDS_JS))
        result.links = list(page.evaluate(_LINKS_JS))
        result.images, broken = page.evaluate(_BROKEN_IMAGES_JS)
        problems.extend(f"image does not load: {src}" for src in broken)
        result.pictures = page.evaluate(_PICTURES_JS)
        if _is_guide(path) and result.pictures == 0:
            problems.append("a guide whose outputs hold no picture (img, svg or canvas)")
        if path == "search.html":
            page.goto(f"{base}search.html?q={_SEARCH_WORD}", wait_until="load")
            try:
                page.wait_for_selector(_SEARCH_RESULTS, timeout=15_000)
            except PlaywrightTimeoutError:
                problems.append(f"searching for {_SEARCH_WORD!r} finds nothing")
    finally:
        context.close()
    return result


def _check_links(root: Path, base: str, pages: dict[str, Page]) -> tuple[int, int, list[str]]:
    links = anchors = 0
    problems = []
    for page in pages.values():
        for url in dict.fromkeys(page.links):
            target = _target(url, base)
            if target is None:
                continue
            path, anchor = target
            links += 1
            where = f"{page.path}: link {url.removeprefix(base)}"
            if not (root / path).is_file():
                problems.append(f"{where}: no file {path}")
                continue
            if not anchor:
                continue
            anchors += 1
            if path not in pages:
                problems.append(f"{where}: an anchor into {path}, which is not a page")
            elif anchor not in pages[path].ids:
                problems.append(f"{where}: {path} has no element with id {anchor!r}")
    return links, anchors, problems


def check_site(root: Path, chromium: str, pages: list[str] | None = None) -> Report:
    """Open every page of the site at ``root`` (or just ``pages``) in ``chromium``."""
    from playwright.sync_api import sync_playwright

    paths = site_pages(root) if pages is None else pages
    with serve(root) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        try:
            visited = {path: _visit(browser, base, path) for path in paths}
        finally:
            browser.close()
        links, anchors, link_problems = _check_links(root, base, visited)
    problems = [f"{p.path}: {problem}" for p in visited.values() for problem in p.problems]
    return Report(visited, links, anchors, problems + link_problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Open every page of the built documentation site in Chromium."
    )
    parser.add_argument("root", type=Path, help="the built site, e.g. docs/_build/html")
    args = parser.parse_args(argv)
    root: Path = args.root
    if not (root / "index.html").is_file():
        print(f"check_site: no {root / 'index.html'}; build the site first (make docs)")
        return 2
    chromium = find_chromium()
    if chromium is None:
        hint = "install the OS package (apt-get install -y chromium) or set $CHROMIUM"
        if os.environ.get("CI"):
            print(f"check_site: Chromium is missing, and CI is set: {hint}")
            return 2
        print(f"check_site: SKIPPED, the pages were not opened: no Chromium ({hint})")
        return 0
    if importlib.util.find_spec("playwright") is None:
        print("check_site: Playwright is missing: pip install -e '.[docs]' (make docs does)")
        return 2
    report = check_site(root, chromium)
    for problem in report.problems:
        print(f"  {problem}")
    print(f"check_site: {report.summary()}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
