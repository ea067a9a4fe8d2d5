"""The documentation site builds with warnings as errors, and works in a real browser.

One build per session (``python -m sphinx -W --keep-going``, the command of docs/README.md) into a
temporary folder; then, with no network: every internal link and ``#anchor`` of every built page
resolves; headless chromium loads every page (one harness page opens each in an iframe and reads its
title and text); and the site's search finds ``inverse_harmonic_mean_rank``. Skipped when Sphinx or
chromium is absent, failed instead under ``KGEVAL_REQUIRE_CHROMIUM`` (.ci/run sets it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("KGEVAL_REQUIRE_CHROMIUM"):
    raise RuntimeError("KGEVAL_REQUIRE_CHROMIUM is set but chromium is not installed")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--allow-file-access-from-files"]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, f"the docs build failed (warnings are errors):\n{res.stderr[-6000:]}"
    return out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts and not p.name.startswith("_"))


def test_the_site_has_the_pages_the_issue_names(site):
    names = {str(p.relative_to(site)) for p in _pages(site)}
    for page in ("index.html", "getting-started.html", "install.html", "guide/evaluate.html", "guide/metrics.html",
                 "guide/protocol.html", "guide/compare.html", "guide/adjust.html", "guide/reports.html",
                 "guide/hpo.html", "guide/distributed.html", "guide/performance.html", "guide/differences.html",
                 "api/index.html", "cli.html", "changelog.html", "api/generated/kgeval.evaluation.evaluate.html"):
        assert page in names
    # the CLI reference is generated from the commands: every command is on it
    from kgeval.cli import main

    cli = (site / "cli.html").read_text(encoding="utf-8")
    headings = set(re.findall(r"<h3>([\w-]+)<", cli))
    assert set(main.commands) <= headings, set(main.commands) - headings


def test_no_internal_link_is_broken(site):
    parsed = {p: _parse(p) for p in _pages(site)}
    broken = []
    for page, links in parsed.items():
        for href in links.hrefs:
            parts = urlsplit(href)
            if parts.scheme or href.startswith(("mailto:", "//")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {href} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)} -> {href} (no such anchor)")
    assert not broken, "\n".join(broken[:50])


def _chromium_dom(url: str, budget_ms: int) -> str:
    res = subprocess.run([CHROMIUM, *FLAGS, f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=600)
    return res.stdout


@needs_chromium
def test_every_page_loads_in_chromium(site):
    pages = [str(p.relative_to(site)) for p in _pages(site)]
    harness = site / "_pagecheck.html"
    harness.write_text("""<html><body><pre id="out"></pre><script>
const pages = %s; const out = []; let i = 0;
function next() {
  if (i >= pages.length) { document.getElementById('out').textContent = JSON.stringify(out); return; }
  const f = document.createElement('iframe'), p = pages[i++];
  f.onload = () => { let r; try { const d = f.contentDocument;
      r = [p, d.title, (d.querySelector('main') || d.body).innerText.trim().length]; }
    catch (e) { r = [p, 'ERROR ' + e, 0]; } out.push(r); f.remove(); next(); };
  f.src = p; document.body.appendChild(f);
}
next();
</script></body></html>""" % json.dumps(pages), encoding="utf-8")
    dom = _chromium_dom(harness.as_uri(), 900_000)
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), "the harness did not finish loading the pages"
    loaded = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert [p for p, _, _ in loaded] == pages
    failed = [(p, title, size) for p, title, size in loaded 
              if not title.endswith("kgeval") or (size < 50 and p != "search.html")]  # search: empty until asked
    assert not failed, failed


@needs_chromium
def test_search_finds_the_mrr_key(site):
    dom = _chromium_dom((site / "search.html").as_uri() + "?q=inverse_harmonic_mean_rank", 20_000)
    hits = re.findall(r'<li class="kind-\w+"><a href="([^"]+)"', dom)
    assert hits, "the search returned nothing for inverse_harmonic_mean_rank"
    assert any(h.startswith(("guide/", "api/")) for h in hits), hits
