"""The built documentation site, opened in headless Chromium (docs/check_site.py): pages
render, formulas are typeset, figures load, internal links resolve; and the check fails on a
site where they do not.

`.ci/run` builds the site into docs/_build/html before the tests and installs Chromium from
the system package manager where it can; without Chromium or a built site these tests skip
and say why."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"


def _checker():
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "docs" / "check_site.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


check = _checker()
needs_chromium = pytest.mark.skipif(check.find_chromium() is None, reason="no Chromium (apt-get install chromium); .ci/run installs it")


@needs_chromium
@pytest.mark.skipif(not (SITE / "index.html").is_file(), reason="no built site: python -m sphinx -W -b html docs docs/_build/html (.ci/run does)")
def test_built_site_renders_in_a_browser():
    rep = check.check_site(SITE)
    assert rep["problems"] == {}, rep["problems"]
    assert rep["pages"] >= 40 and rep["images"] >= 20 and rep["links"] >= 500
    assert rep["maths"] >= 20  # docs/model.md's formulas, typeset by MathJax


@needs_chromium
def test_check_fails_on_a_broken_site(tmp_path):
    """A page with a missing figure, a dead link, a dead anchor and an untypeset formula fails each check."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "ok.html").write_text('<html><head><title>ok</title></head><body><div class="body"><h1 id="top">fine page</h1>'
                                  '<p>some text that is long enough to count</p></div></body></html>')
    (site / "index.html").write_text(
        '<html><head><title>broken</title></head><body><div class="body"><p>a page with enough text to count as rendered</p>'
        '<img src="missing.png"><a href="nowhere.html">dead</a><a href="ok.html#nope">dead anchor</a>'
        '<a href="ok.html#top">fine</a><span class="math notranslate nohighlight">\\(x^2\\)</span></div></body></html>')
    rep = check.check_site(site)
    probs = rep["problems"].get("index.html", [])
    assert "ok.html" not in rep["problems"]
    assert any("image not loaded: missing.png" in p for p in probs), probs
    assert any("missing file: nowhere.html" in p for p in probs), probs
    assert any("missing anchor: ok.html#nope" in p for p in probs), probs
    assert any(p.startswith("formulas: 0 of 1") for p in probs), probs
    assert len(probs) == 4, probs


def test_check_site_names_a_missing_site(tmp_path):
    with pytest.raises(FileNotFoundError, match="no built site"):
        check.check_site(tmp_path)
