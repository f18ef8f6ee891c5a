"""The times README.md and the user guide state, measured on this machine (issue 26), side by side.

    python benchmarks/readme_times.py [--suite] [--long]   # measure; writes benchmarks/readme-times.json
    python benchmarks/readme_times.py --update-readme       # rewrite README.md's numbers from that JSON
    python benchmarks/readme_times.py --suite --update-readme   # both: measure (with the suite), then rewrite
    python benchmarks/readme_times.py --check               # exit 1 when README.md and the JSON disagree

Each command runs in a subprocess with stdout and stderr on pipes (not a terminal), from a
temporary working folder, and with a fresh Numba cache directory (NUMBA_CACHE_DIR), so the
first run compiles the kernels as the first run after an install does:

* ``default_first_run`` -- ``spherepde run`` (the default configuration), compiling;
* ``default_later_run`` -- the same again, the kernels loaded from the cache;
  both with ``first_line_s``, the seconds until the first line appears on either stream;
* ``h100_particle_run`` -- ``spherepde run --example paper-ou-particles --set model.H=100``
  (after a short warm-up run that compiles the particle kernels);
* ``render_gif`` -- ``spherepde render RUN --gif --frames 200`` of a 20,480-cell run;
* ``suite`` (``--suite``, minutes) -- ``python -m pytest -q -m "not slow"`` in the repository;
* ``paper_ou_mesh`` (``--long``, minutes) -- ``spherepde run --example paper-ou-mesh``.

A measurement not taken in a call keeps its earlier value; every entry has its own date and
load averages (before and after), and the JSON says whether the machine was loaded. The
sentences of README.md and docs/guide/ (:data:`DOC_PATHS`) that state these times are listed in :data:`SENTENCES`; ``--update-readme`` rewrites
their numbers (rounded as :func:`rounded` says) and ``tests/test_readme_numbers.py`` checks them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH = ROOT / "benchmarks" / "readme-times.json"
README_PATH = ROOT / "README.md"
#: The pages whose sentences state these times: README.md and the user guide pages they moved to.
DOC_PATHS = (README_PATH, ROOT / "docs" / "guide" / "paper.md", ROOT / "docs" / "guide" / "visualisation.md")
#: Joins the pages into one text for the functions below (never inside a sentence: no white space).
_SEP = "\n\x00next-page\x00\n"


def read_docs() -> str:
    """The pages of :data:`DOC_PATHS` as one text (what :func:`stated_numbers` and friends read)."""
    return _SEP.join(p.read_text(encoding="utf-8") for p in DOC_PATHS)


def write_docs(text: str) -> list[Path]:
    """Write a text made by :func:`read_docs` (and rewritten by :func:`update_readme`) back to its pages; returns those changed."""
    parts = text.split(_SEP)
    if len(parts) != len(DOC_PATHS):
        raise ValueError("the text does not come from read_docs()")
    changed = []
    for p, t in zip(DOC_PATHS, parts):
        if p.read_text(encoding="utf-8") != t:
            p.write_text(t, encoding="utf-8")
            changed.append(p)
    return changed


#: README sentences that state a measured time: the text with ``{key}`` where the number of the
#: measurement ``key`` stands (seconds, or minutes for keys ending in ``_min``), matched with any
#: white space (the README wraps its lines). Each must occur exactly once.
SENTENCES = [
    "start to T = 2 (about {default_later_run} s; the first run after an install compiles the kernels "
    "first, says so on its first line, and takes about {default_first_run} s); it writes",
    "One H = 100 run (4,000 steps) takes about {h100_particle_run} s here.",
    "A 200-frame GIF of a 20,480-cell mesh renders in about {render_gif} s on this 2-core machine",
    "# the CI command (.ci/run), about {suite_min} minutes here",
    "spherepde run --example paper-ou-mesh          # about {paper_ou_mesh} s on this 2-core machine",
]

#: Times measured only on request (--suite, --long): until then the README states '?'.
OPTIONAL = {"suite_min", "paper_ou_mesh"}


# ------------------------------------------------------------------------------ rounding
def rounding_step(x: float, minutes: bool = False) -> float:
    """The step a stated time is rounded to: 1 s below 10 s, 5 s below 60 s, 10 s above;
    minutes to 0.5 below 10 minutes, to 1 above."""
    if minutes:
        return 0.5 if x < 10 else 1.0
    return 1.0 if x < 10 else 5.0 if x < 60 else 10.0


def rounded(x: float, minutes: bool = False) -> str:
    """``x`` (seconds, or minutes) as the README states it: '30', '4.5', '120'."""
    step = rounding_step(x, minutes)
    v = max(step, round(x / step) * step)
    return f"{v:g}"


def _value(measurements: dict, key: str) -> tuple[float, bool] | None:
    """The number for ``key`` in the README's unit (minutes for ``*_min``) and whether minutes; None when not measured."""
    minutes = key.endswith("_min")
    entry = measurements.get(key[:-4] if minutes else key)
    if not entry or entry.get("seconds") is None:
        return None
    return (entry["seconds"] / 60 if minutes else entry["seconds"]), minutes


def _pattern(sentence: str) -> re.Pattern:
    parts = re.split(r"(\{\w+\})", sentence)
    rx = ""
    for p in parts:
        if p.startswith("{") and p.endswith("}"):
            rx += rf"(?P<{p[1:-1]}>[0-9][0-9,.]*|\?)"
        else:
            rx += r"\s+".join(re.escape(w) for w in p.split(" ")) if p.strip() else r"\s+" * bool(p)
    return re.compile(rx)


def stated_numbers(readme: str) -> dict[str, float | None]:
    """The number each :data:`SENTENCES` entry states in ``readme`` (None for '?', a time not
    measured yet; ValueError when a sentence is missing or occurs more than once)."""
    found = {}
    for s in SENTENCES:
        matches = list(_pattern(s).finditer(readme))
        if len(matches) != 1:
            raise ValueError(f"README.md holds {len(matches)} copies of the sentence {s!r} (one expected)")
        found.update({k: None if v == "?" else float(v.replace(",", "")) for k, v in matches[0].groupdict().items()})
    return found


def update_readme(readme: str, measurements: dict) -> str:
    """``readme`` with the number of every :data:`SENTENCES` entry replaced by its rounded
    measurement ('?' for a time not measured yet)."""
    for s in SENTENCES:
        rx = _pattern(s)
        matches = list(rx.finditer(readme))
        if len(matches) != 1:
            raise ValueError(f"README.md holds {len(matches)} copies of the sentence {s!r} (one expected)")
        m = matches[0]
        out, pos = [], m.start()
        for key in rx.groupindex:
            start, end = m.span(key)
            v = _value(measurements, key)
            out += [readme[pos:start], rounded(*v) if v else "?"]
            pos = end
        readme = readme[: m.start()] + "".join(out) + readme[pos:]
    return readme


def disagreements(readme: str, measurements: dict) -> list[str]:
    """README numbers further from the JSON than half their rounding step (empty: they agree)."""
    bad = []
    for key, stated in stated_numbers(readme).items():
        v = _value(measurements, key)
        if v is None or stated is None:
            if v is not None or stated is not None or key not in OPTIONAL:
                bad.append(f"{key}: README states {'?' if stated is None else f'{stated:g}'}, measured "
                           f"{'nothing' if v is None else f'{v[0]:.3g}'} (benchmarks/readme-times.json)")
            continue
        x, minutes = v
        if abs(stated - x) > rounding_step(x, minutes) / 2 + 1e-9 and rounded(x, minutes) != f"{stated:g}":
            bad.append(f"{key}: README states {stated:g}, measured {x:.3g} {'minutes' if minutes else 's'}")
    return bad


# ------------------------------------------------------------------------------ measuring
def _load() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def timed(cmd: list[str], *, cwd: Path, env: dict, timeout: float = 3600, check: bool = True) -> dict:
    """Run ``cmd`` with stdout and stderr on pipes: wall seconds, seconds to the first line, exit
    code (RuntimeError for a nonzero one when ``check``)."""
    load0 = _load()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first_line = None
    tail = {"stdout": b"", "stderr": b""}
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
    open_streams = 2
    while open_streams:
        if time.monotonic() - t0 > timeout:
            proc.kill()
            break
        for key, _ in sel.select(timeout=1.0):
            data = os.read(key.fileobj.fileno(), 65536)
            if not data:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            tail[key.data] = (tail[key.data] + data)[-4000:]
            if first_line is None and b"\n" in data:
                first_line = time.monotonic() - t0
    rc = proc.wait()
    wall = time.monotonic() - t0
    out = {"seconds": round(wall, 2), "first_line_s": None if first_line is None else round(first_line, 2),
           "exit_code": rc, "command": " ".join(cmd), "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "load_average_before": load0, "load_average_after": _load()}
    if rc != 0 and check:
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}:\n{tail['stderr'].decode(errors='replace')}")
    return out


def _spherepde() -> list[str]:
    exe = shutil.which("spherepde")
    return [exe] if exe else [sys.executable, "-m", "spherepde"]


def measure(*, suite: bool, long: bool, log=print) -> dict:
    """Measure what README.md states; returns {key: entry}."""
    sp = _spherepde()
    res = {}
    with tempfile.TemporaryDirectory(prefix="readme-times-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(work / "numba-cache"), MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
        log("default run, first (compiling the kernels in a fresh Numba cache directory) ...")
        res["default_first_run"] = timed(sp + ["run"], cwd=work, env=env)
        log(f"  {res['default_first_run']['seconds']:.1f} s; again (the kernels cached) ...")
        res["default_later_run"] = timed(sp + ["run", "--force"], cwd=work, env=env)
        log(f"  {res['default_later_run']['seconds']:.1f} s; one H = 100 particle run ...")
        h100 = ["run", "--example", "paper-ou-particles", "--set", "model.H=100", "-q"]
        timed(sp + h100 + ["--set", "solver.T=0.05", "--out", "runs/warm-up"], cwd=work, env=env)  # compiles the particle kernels
        res["h100_particle_run"] = timed(sp + h100, cwd=work, env=env)
        log(f"  {res['h100_particle_run']['seconds']:.1f} s; a 200-frame GIF of a 20,480-cell mesh ...")
        timed(sp + ["run", "--set", "mesh.level=32", "--set", "solver.T=0.5", "--set", "output.vtk=false", "--out", "runs/level32", "-q"],
              cwd=work, env=env)
        timed(sp + ["render", "runs/level32", "--times", "0.5", "--out", "warm-up-png", "-q"], cwd=work, env=env)
        res["render_gif"] = timed(sp + ["render", "runs/level32", "--gif", "--frames", "200", "--out", "gif", "-q"], cwd=work, env=env)
        log(f"  {res['render_gif']['seconds']:.1f} s")
        if long:
            log("paper-ou-mesh (20,480 cells, T = 20) ...")
            timed(sp + ["run", "--example", "paper-ou-mesh", "--set", "solver.T=0.02", "--out", "runs/warm-up-mesh", "-q"], cwd=work, env=env)
            res["paper_ou_mesh"] = timed(sp + ["run", "--example", "paper-ou-mesh", "-q"], cwd=work, env=env)
            log(f"  {res['paper_ou_mesh']['seconds']:.1f} s")
    if suite:
        log('the test suite: python -m pytest -q -m "not slow" ...')
        res["suite"] = timed([sys.executable, "-m", "pytest", "-q", "-m", "not slow"], cwd=ROOT, env=dict(os.environ, MPLBACKEND="Agg"),
                             check=False)  # its time, whatever the outcome (exit_code says it)
        log(f"  {res['suite']['seconds'] / 60:.1f} minutes")
    return res


def machine() -> dict:
    import numba

    return {"node": platform.node(), "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "numba": numba.__version__,
            "numba_threads": numba.config.NUMBA_NUM_THREADS}


def write_json(new: dict, path: Path = JSON_PATH) -> dict:
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    meas = {**old.get("measurements", {}), **new}
    loads = [e.get("load_average_before") for e in new.values() if e.get("load_average_before")]
    cpus = os.cpu_count() or 1
    loaded = any(la[0] > 0.5 for la in loads)
    doc = {
        "command": "python benchmarks/readme_times.py [--suite] [--long]",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": _load(),
        "loaded": loaded or bool(old.get("loaded") and set(meas) - set(new)),
        "note": ("measured while other work ran on the machine (load average above 0.5 on "
                 f"{cpus} cores): loaded-machine times, longer than on an idle machine" if loaded else
                 "measured on an idle machine (load average below 0.5)"),
        "measurements": meas,
        "ratios": {},
    }
    m = doc["measurements"]
    shipped = ROOT / "validation" / "paper-ou-mesh" / "summary.json"
    if "paper_ou_mesh" not in m and shipped.is_file():  # until --long measures it: the shipped run's own wall time
        m["paper_ou_mesh"] = {"seconds": round(json.loads(shipped.read_text(encoding="utf-8"))["wall_time_s"], 2),
                              "source": "validation/paper-ou-mesh/summary.json (wall_time_s of the shipped run)",
                              "command": "spherepde run --example paper-ou-mesh"}
    if "default_first_run" in m and "default_later_run" in m:
        doc["ratios"]["default_first_over_later_run"] = round(m["default_first_run"]["seconds"] / m["default_later_run"]["seconds"], 2)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="store_true", help='also time the test suite (python -m pytest -q -m "not slow"; minutes)')
    ap.add_argument("--long", action="store_true", help="also time spherepde run --example paper-ou-mesh (minutes)")
    ap.add_argument("--update-readme", action="store_true", help="rewrite README.md's numbers from benchmarks/readme-times.json (alone: measures nothing; with --suite/--long: after measuring)")
    ap.add_argument("--check", action="store_true", help="compare README.md with benchmarks/readme-times.json (measures nothing)")
    args = ap.parse_args(argv)
    if args.suite or args.long or not (args.update_readme or args.check):
        doc = write_json(measure(suite=args.suite, long=args.long))
        print(json.dumps({k: {"seconds": v["seconds"], "first_line_s": v.get("first_line_s")} for k, v in doc["measurements"].items()}, indent=2))
        print(f"wrote {JSON_PATH.relative_to(ROOT)} ({doc['note']})")
    if not JSON_PATH.is_file():
        print(f"no {JSON_PATH.relative_to(ROOT)}: run python benchmarks/readme_times.py first", file=sys.stderr)
        return 2
    readme = read_docs()
    meas = json.loads(JSON_PATH.read_text(encoding="utf-8"))["measurements"]
    if args.update_readme:
        new = update_readme(readme, meas)
        changed = write_docs(new)
        print(("updated " + ", ".join(str(p.relative_to(ROOT)) for p in changed)) if changed else "README.md and the guide already state these numbers")
        readme = new
    bad = disagreements(readme, meas)
    for b in bad:
        print(b)
    if bad and not args.check:
        print("README.md states other numbers; rewrite them with: python benchmarks/readme_times.py --update-readme")
    return 1 if bad and args.check else 0

if __name__ == "__main__":
    sys.exit(main())
