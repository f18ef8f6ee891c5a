"""Open the built documentation site in a real browser (headless Chromium) and check it.

    python -m sphinx -W -b html docs docs/_build/html     # build the site first
    python docs/check_site.py [docs/_build/html]          # exit 1 naming every problem

For every HTML page of the site, Chromium loads the page (file://, no network) inside a
harness page and reports, after the page's scripts have run:

* the page rendered: a title and a non-empty main body, no visible "Error" from MathJax;
* formulas show: every ``math`` element of the page was typeset by MathJax (an
  ``mjx-container``), and no raw ``$$`` or ``\\(`` is left in the text;
* figures load: every ``<img>`` has finished loading with a non-zero natural size;
* internal links resolve: every relative ``href`` points to a file of the site, and its
  ``#anchor``, if any, to an element of that page.

Chromium comes from the system package manager (Debian: ``apt-get install chromium``); the
script looks for ``chromium``, ``chromium-browser`` or ``google-chrome`` on the PATH, or
``$CHROMIUM``. Used by ``tests/test_docs_site.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The harness: loads each page in an iframe, waits for MathJax, and writes a JSON report
#: into <pre id="report"> (read back from the DOM that Chromium dumps).
HARNESS = r"""<!doctype html><html><body><pre id="report">pending</pre><script>
const pages = __PAGES__;
const results = {};
function check(doc, page) {
  const problems = [];
  const body = doc.querySelector('div.body, main, [role=main]') || doc.body;
  if (!doc.title || !body || body.innerText.trim().length < 20) problems.push('empty page');
  const maths = doc.querySelectorAll('.math');
  const typeset = doc.querySelectorAll('mjx-container');
  if (maths.length && typeset.length < maths.length) problems.push(`formulas: ${typeset.length} of ${maths.length} typeset`);
  if (doc.querySelector('mjx-merror, .MathJax_Error')) problems.push('MathJax error in a formula');
  const text = body ? body.innerText : '';
  if (text.includes('$$')) problems.push('raw $$ in the text');
  for (const img of doc.querySelectorAll('img')) {
    if (!img.complete || img.naturalWidth === 0) problems.push('image not loaded: ' + img.getAttribute('src'));
  }
  return {problems, maths: maths.length, typeset: typeset.length, images: doc.querySelectorAll('img').length,
          links: [...doc.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))
                 .filter(h => !/^(https?:|mailto:|javascript:)/.test(h))};
}
function load(i) {
  if (i >= pages.length) { document.getElementById('report').textContent = JSON.stringify(results); return; }
  const f = document.createElement('iframe');
  f.style.width = '1200px'; f.style.height = '900px';
  f.onload = () => {
    const doc = f.contentDocument;
    const finish = () => { try { results[pages[i]] = check(doc, pages[i]); } catch (e) { results[pages[i]] = {problems: ['harness: ' + e]}; }
                           f.remove(); load(i + 1); };
    const mj = f.contentWindow.MathJax;
    if (doc.querySelector('.math') && mj && mj.startup && mj.startup.promise) mj.startup.promise.then(() => setTimeout(finish, 50), finish);
    else setTimeout(finish, 50);
  };
  f.src = pages[i];
  document.body.appendChild(f);
}
load(0);
</script></body></html>"""


def find_chromium() -> str | None:
    """The Chromium executable: ``$CHROMIUM`` or the first of chromium / chromium-browser / google-chrome on the PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _anchors(html: str) -> set[str]:
    import re

    return set(re.findall(r'\bid="([^"]+)"', html))


def check_site(site, *, chromium: str | None = None, timeout: float = 300.0) -> dict:
    """Check every page of the built site ``site`` in headless Chromium.

    Returns ``{"pages": n, "problems": {page: [problem, ...]}, "maths": typeset formulas,
    "images": images, "links": internal links checked}``; ``problems`` is empty when all is well.
    Raises FileNotFoundError when there is no site or no Chromium.
    """
    site = Path(site).resolve()
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no built site at {site} (build it: python -m sphinx -W -b html docs {site})")
    chromium = chromium or find_chromium()
    if not chromium:
        raise FileNotFoundError("no Chromium found: install it (apt-get install chromium) or set $CHROMIUM")
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if not p.name.startswith("_") and "_static" not in p.parts and "_sources" not in p.parts)
    harness = site / "_check_site.html"
    harness.write_text(HARNESS.replace("__PAGES__", json.dumps(pages)), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as profile:
            cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                   f"--user-data-dir={profile}", "--virtual-time-budget=600000", "--run-all-compositor-stages-before-draw",
                   "--dump-dom", harness.as_uri()]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    finally:
        harness.unlink(missing_ok=True)
    start, end = out.find('<pre id="report">'), out.find("</pre>")
    raw = out[start + len('<pre id="report">'):end] if start >= 0 else ""
    if not raw or raw == "pending":
        raise RuntimeError("Chromium did not finish the check (no report in the page it dumped)")
    import html as _html

    results = json.loads(_html.unescape(raw))
    problems = {p: r["problems"] for p, r in results.items() if r.get("problems")}
    problems.update({p: ["not checked"] for p in pages if p not in results})
    anchors_cache: dict[Path, set[str]] = {}
    n_links = 0
    for page, r in results.items():
        base = (site / page).parent
        for href in r.get("links", []):
            target, _, anchor = href.partition("#")
            path = (site / page) if not target else (base / target.split("?")[0]).resolve()
            n_links += 1
            if not path.exists():
                problems.setdefault(page, []).append(f"link to a missing file: {href}")
            elif anchor and path.suffix == ".html":
                ids = anchors_cache.setdefault(path, _anchors(path.read_text(encoding="utf-8", errors="replace")))
                if anchor not in ids:
                    problems.setdefault(page, []).append(f"link to a missing anchor: {href}")
    return {"pages": len(pages), "problems": problems, "maths": sum(r.get("typeset", 0) for r in results.values()),
            "images": sum(r.get("images", 0) for r in results.values()), "links": n_links}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    site = Path(args[0]) if args else HERE / "_build" / "html"
    try:
        rep = check_site(site)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"check_site: {exc}", file=sys.stderr)
        return 2
    for page, probs in sorted(rep["problems"].items()):
        for p in probs:
            print(f"{page}: {p}")
    print(f"{rep['pages']} pages, {rep['maths']} formulas typeset, {rep['images']} images, {rep['links']} internal links: "
          + ("all fine" if not rep["problems"] else f"problems on {len(rep['problems'])} pages"))
    return 1 if rep["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
