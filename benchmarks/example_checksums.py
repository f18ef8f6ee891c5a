"""sha256 of diagnostics.csv for every shipped example run at a small size, and a few more cases
that cover the regimes the shipped files do not (both solvers, general heads, d = 5 tokens,
midpoint velocity, direct and fast sums, Euler-Maruyama and exact weights).

A refactoring that must not change behaviour keeps every checksum: record them before, compare
after (``--check``). A checksum covers the columns of the recorded file only (the CSV cut to
those columns, in their order), so a change that adds columns keeps the existing ones checked. The numbers depend on the machine's floating point and Numba's code
generation, so the committed file is a record of this project's CI machine, not a test.

Usage::

    python benchmarks/example_checksums.py                 # print {case: sha256} as JSON
    python benchmarks/example_checksums.py --write FILE    # write it
    python benchmarks/example_checksums.py --check FILE    # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from spherepde.cli.main import main as spherepde

SMALL = {
    "clustering-mesh": ["mesh.level=8", "solver.T=0.3", "output.record_dt=0.05", "output.snapshot_dt=0.1"],
    "clustering-particles": ["initial.n=60", "solver.T=0.3", "output.record_dt=0.05", "output.snapshot_dt=0.1"],
    "metastable-mesh": ["mesh.level=8", "solver.T=4.0", "output.record_dt=0.5", "output.snapshot_dt=2.0"],
    "metastable-particles": ["initial.n=60", "solver.T=0.5", "output.record_dt=0.1", "output.snapshot_dt=0.2"],
    "paper-oscillating-mesh": ["mesh.level=8", "solver.T=0.3", "output.record_dt=0.1", "output.snapshot_dt=0.1"],
    "paper-oscillating-particles": ["initial.n=60", "solver.T=0.3", "output.record_dt=0.1", "output.snapshot_dt=0.1"],
    "paper-ou-mesh": ["mesh.level=8", "solver.T=0.3", "output.record_dt=0.1", "output.snapshot_dt=0.1"],
    "paper-ou-particles": ["initial.n=60", "solver.T=0.3", "output.record_dt=0.1", "output.snapshot_dt=0.1"],
    "circle-metastable-mesh": ["mesh.cells=128", "solver.T=0.3", "output.record_dt=0.05", "output.snapshot_dt=0.1"],
    "circle-metastable-particles": ["initial.n=100", "solver.T=0.3", "output.record_dt=0.05", "output.snapshot_dt=0.1"],
    "noisy-clustering-mesh": ["mesh.level=8", "solver.T=2.0", "output.record_dt=0.5", "output.snapshot_dt=1.0"],
    "noisy-clustering-particles": ["initial.n=60", "solver.T=0.5", "output.record_dt=0.1", "output.snapshot_dt=0.2"],
}
#: regimes beyond the shipped files: (example to start from, overrides)
EXTRA = {
    "both-ou": ("paper-ou-mesh", ["run.solver=both", "initial.n=80", "mesh.level=6", "solver.T=0.2", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
    "mesh-general-midpoint-direct": ("paper-ou-mesh", ["model.heads=general", "solver.velocity=midpoint", "solver.summation=direct", "solver.order=1", "solver.integrator=ssprk3", "mesh.level=6", "solver.T=0.2", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
    "mesh-fast-heun-exactou": ("paper-ou-mesh", ["solver.summation=fast", "solver.integrator=heun", "weights.scheme=exact", "model.H=3", "mesh.level=8", "solver.T=0.2", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
    "mesh-implicit-noatoms-repulsive": ("paper-ou-mesh", ["solver.integrator=implicit", "solver.order=1", "mesh.level=6", "solver.T=0.3", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
    "tokens-d5-general": ("paper-ou-particles", ["model.d=5", "model.heads=general", "initial.kind=uniform", "initial.n=40", "solver.T=0.2", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
    "tokens-d2-heun": ("paper-ou-particles", ["model.d=2", "initial.kind=uniform", "solver.integrator=heun", "initial.n=40", "solver.T=0.2", "output.record_dt=0.1", "output.snapshot_dt=0.1"]),
}


def _columns_sha(csv_path: Path, columns: list[str] | None) -> dict:
    """sha256 of the CSV text cut to ``columns`` (all of them when None), and the columns."""
    rows = [line.split(",") for line in csv_path.read_text().splitlines()]
    header = rows[0]
    cols = header if columns is None else columns
    missing = [c for c in cols if c not in header]
    if missing:
        return {"columns": cols, "sha256": f"missing columns {missing}"}
    idx = [header.index(c) for c in cols]
    text = "\n".join(",".join(r[i] for i in idx) for r in rows) + "\n"
    return {"columns": cols, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _run(example: str, sets: list[str], out: Path, name: str, columns: list[str] | None) -> dict:
    args = ["run", "--example", example, "--out", str(out / name), "-q"]
    for s in [*sets, "output.vtk=false"]:
        args += ["--set", s]
    rc = spherepde(args)
    if rc:
        raise SystemExit(f"{name}: spherepde run exited {rc}")
    return _columns_sha(out / name / "diagnostics.csv", columns)


def checksums(want: dict | None = None) -> dict[str, dict]:
    """{case: {"columns": [...], "sha256": ...}}; with ``want``, over the columns recorded there."""
    cases = {name: (name, sets) for name, sets in SMALL.items()} | EXTRA
    with tempfile.TemporaryDirectory() as tmp:
        return {name: _run(ex, sets, Path(tmp), name, (want or {}).get(name, {}).get("columns")) for name, (ex, sets) in cases.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path)
    ap.add_argument("--check", type=Path)
    a = ap.parse_args(argv)
    want = json.loads(a.check.read_text()) if a.check else None
    got = checksums(want)
    if a.write:
        a.write.write_text(json.dumps(got, indent=1) + "\n")
    if a.check:
        bad = sorted(k for k in want if want[k] != got.get(k))
        for k in bad:
            print(f"DIFFERS: {k}")
        for k in sorted(got.keys() - want.keys()):
            print(f"NEW (not in {a.check.name}): {k}")
        print(f"{len(want) - len(bad)} of {len(want)} checksums unchanged")
        return 1 if bad else 0
    print(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
