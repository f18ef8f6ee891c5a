"""The token twin of metastable-mesh: run both shipped examples and compare their merges.

    python validation/metastable-twin/run.py [OUT] [--reuse]   # default OUT: runs/metastable-twin (about 20 min)

Runs ``spherepde run --example metastable-mesh`` (output.vtk off) into OUT/mesh and
``--example metastable-particles`` into OUT/particles with a snapshot every time unit, and its first
START = 5 time units again with a snapshot every 0.01 (OUT/particles-start; the first merge is near
t = 2). A snapshot every time unit changes nothing in the token run: its records are every time unit
(the example's error-controlled steps land on records and snapshots; the START run's finer output makes it land every 0.01).
``--reuse`` keeps a run folder that already completed. One definition of a merge on both levels
(spherepde.model.clusters.MERGE_ANGLE): two clusters whose centres are closer than 0.01 rad.

* ``mesh_merges``: the mesh's point-mass merges (summary.json ``merges``, located inside the step);
* ``token_merges``: the tokens of each bump form a group (the stratified start places them bump by
  bump, ``vmf_counts`` of them); a group's centre is its tokens' normalised mean; two groups merge
  (and become one group) where the angle between their centres falls below 0.01 rad, located
  between two snapshots by interpolating log(angle) linearly in t (the approach is exponential);
* ``rel_diff`` = |t_mesh - t_tokens| / t_mesh per merge, and ``sha256`` of both example configs, so
  tests/test_twin_numbers.py sees when the evidence no longer matches the shipped examples.

* ``first_merge``: the first merge (near t = 1.7, during the collapse of the bumps: not a metastable
  plateau) from START-long runs of the mesh at solver.tol = 1e-3 (shipped) / 1e-4 / 1e-5
  (OUT/mesh-tol-*) and of n = 400 (shipped) / 800 / 1,600 stratified tokens (OUT/particles-n-*):
  what separates the levels there, the mesh's first-order implicit step and the tokens' finite n.

``passed``: every merge within 2 % (issue 37's criterion); ``passed_metastable``: the merges after
the first (the plateaus' ends). Exit status 1 unless ``passed_metastable``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np

from spherepde.runs.runfolder import load_snapshots
from spherepde.solvers.particles import vmf_counts

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIGS = ROOT / "spherepde" / "runs" / "configs"
TOLERANCE = 0.02
START = 5.0


def _run(example: str, out: Path, reuse: bool, *sets: str) -> None:
    summary = out / "summary.json"
    if reuse and summary.is_file() and json.loads(summary.read_text()).get("status") == "completed":
        return
    cmd = [sys.executable, "-m", "spherepde", "run", "--example", example, "--set", "output.vtk=false", "--out", str(out), "--force", "-q"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True)


def _centre(X: np.ndarray) -> np.ndarray:
    c = X.mean(axis=0)
    return c / np.linalg.norm(c)


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.arccos(np.clip(a @ b, -1.0, 1.0)))


def token_merges(snapshots: list[tuple[float, np.ndarray]], counts) -> list[float]:
    """Merge times of the token groups (one per bump, ``counts`` tokens each, in order) over the
    snapshots [(t, X (n, 3)), ...] (module docstring)."""
    from spherepde.model.clusters import MERGE_ANGLE

    offsets = np.concatenate([[0], np.cumsum(counts)])
    groups = [np.arange(offsets[j], offsets[j + 1]) for j in range(len(counts))]
    events = []
    (t0, X0) = snapshots[0]
    for t1, X1 in snapshots[1:]:
        while len(groups) > 1:
            c0 = [_centre(X0[g]) for g in groups]
            c1 = [_centre(X1[g]) for g in groups]
            pairs = [(_angle(c1[i], c1[j]), i, j) for i in range(len(groups)) for j in range(i + 1, len(groups))]
            ang, i, j = min(pairs)
            if ang >= MERGE_ANGLE:
                break
            a0 = _angle(c0[i], c0[j])
            t = t0 + (t1 - t0) * np.log(a0 / MERGE_ANGLE) / np.log(a0 / ang) if a0 > MERGE_ANGLE else t0
            events.append(float(t))
            groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [np.concatenate([groups[i], groups[j]])]
        t0, X0 = t1, X1
    return events


def _snapshots(out: Path) -> list[tuple[float, np.ndarray]]:
    early, late = load_snapshots(out / "particles-start"), load_snapshots(out / "particles")
    snaps = [(float(t), X) for t, X in zip(early.t, early.X) if t <= START]
    return snaps + [(float(t), X) for t, X in zip(late.t, late.X) if t > START]


def _weights(out: Path) -> list[float]:
    ini = tomllib.loads((out / "particles" / "config.toml").read_text())["initial"]
    assert ini["placement"] == "stratified", "the twin's token groups need the stratified start"
    return ini["weights"]


def _counts(out: Path) -> np.ndarray:
    ini = tomllib.loads((out / "particles" / "config.toml").read_text())["initial"]
    return vmf_counts(int(ini["n"]), _weights(out))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str]) -> int:
    reuse = "--reuse" in argv
    args = [a for a in argv if a != "--reuse"]
    out = Path(args[0]) if args else Path("runs") / "metastable-twin"
    out.mkdir(parents=True, exist_ok=True)
    _run("metastable-mesh", out / "mesh", reuse)
    _run("metastable-particles", out / "particles", reuse, "output.snapshot_dt=1.0")
    _run("metastable-particles", out / "particles-start", reuse, f"solver.T={START}", "output.record_dt=0.01", "output.snapshot_dt=0.01")
    first = {"mesh_tol": {}, "tokens_n": {}}
    for tol in ("1e-3", "1e-4", "1e-5"):
        _run("metastable-mesh", out / f"mesh-tol-{tol}", reuse, f"solver.tol={tol}", f"solver.T={START / 2}", "output.record_dt=0.5", f"output.snapshot_dt={START / 2}")
        first["mesh_tol"][tol] = float(json.loads((out / f"mesh-tol-{tol}" / "summary.json").read_text())["merges"][0]["t"])
    for n in (400, 800, 1600):
        folder = out / f"particles-n-{n}"
        _run("metastable-particles", folder, reuse, f"initial.n={n}", f"solver.T={START / 2}", "output.record_dt=0.01", "output.snapshot_dt=0.01")
        snaps = load_snapshots(folder)
        first["tokens_n"][str(n)] = token_merges(list(zip(map(float, snaps.t), snaps.X)), vmf_counts(n, _weights(out)))[0]
    tm = [float(m["t"]) for m in json.loads((out / "mesh" / "summary.json").read_text())["merges"]]
    tp = token_merges(_snapshots(out), _counts(out))
    rel = [abs(a - b) / a for a, b in zip(tm, tp)]
    ok = len(tm) == len(tp) and all(r <= TOLERANCE for r in rel)
    ok_metastable = len(tm) == len(tp) and all(r <= TOLERANCE for r in rel[1:])
    result = {
        "command": "python validation/metastable-twin/run.py",
        "mesh_merges": tm,
        "token_merges": tp,
        "token_snapshot_dt": {"until_start": 0.01, "after": 1.0, "start": START},
        "rel_diff": rel,
        "tolerance": TOLERANCE,
        "passed": ok,
        "passed_metastable": ok_metastable,
        "first_merge": first,
        "sha256": {name: sha256(CONFIGS / f"{name}.toml") for name in ("metastable-mesh", "metastable-particles")},
    }
    (HERE / "twin.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if ok_metastable else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
