"""Merge results.csv with the three paths per H of validation/report-full/mesh_convergence and
fit the OU exponent as the study does (path means of <G^2> ~ H^b, 95 % bootstrap interval over
paths within each H, ``spherepde.model.statistics.exponent_fit``). Writes analysis.json and prints a table.

    python validation/exponent-more-paths/analyse.py
"""

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from spherepde.model.statistics import exponent_fit
from spherepde.studies.mesh_convergence import SIZES

HERE = Path(__file__).parent
rep = json.loads((HERE.parent / "report-full" / "mesh_convergence" / "report.json").read_text())
e = rep["studies"]["mesh_convergence"]["results"]["exponent"]
mesh, coarse, tok = defaultdict(dict), defaultdict(dict), defaultdict(dict)
for i, H in enumerate(e["H"]):
    for j in range(len(e["mesh_tavg"][i])):
        mesh[H][j], coarse[H][j], tok[H][j] = e["mesh_tavg"][i][j], e["coarse_tavg"][i][j], e["particles_tavg"][i][j]
draws = defaultdict(list)
fine = {}
for r in csv.DictReader((HERE / "results.csv").open()):
    H, j, v = int(r["H"]), int(r["path"]), float(r["G2_time_avg"])
    if r["what"] == "mesh" and int(r["level"]) in (e["level"], e["coarse_level"]):
        (mesh if int(r["level"]) == e["level"] else coarse)[H][j] = v
    elif r["what"] == "mesh":  # a finer check level on single paths
        fine.setdefault(f"H{H}-path{j}-level{r['level']}", v)
    else:
        draws[(H, j)].append(v)
for (H, j), v in draws.items():
    if len(v) == SIZES["full"]["samples"]:
        tok[H][j] = float(np.mean(v))
Hs = sorted(mesh)
out = {"H": Hs, "level": e["level"], "coarse_level": e["coarse_level"], "n": e["n"]}
for name, d in (("mesh", mesh), ("tokens", tok)):
    per_H = [[d[H][j] for j in sorted(d[H]) if j in mesh[H] and j in tok[H]] for H in Hs]
    means = [float(np.mean(v)) for v in per_H]
    f = exponent_fit(Hs, per_H, resamples=SIZES["full"]["bootstrap"], min_runs=2)
    out[name] = {"paths": [len(v) for v in per_H], "per_path": per_H, "means": means, "b": f["b"],
                 "ci95": f["ci95"]}
out["coarse_change_max"] = [float(max(abs(mesh[H][j] - coarse[H][j]) / mesh[H][j] for j in mesh[H] if j in coarse[H])) for H in Hs]
out["finer_levels"] = {k: {"G2": v, "level32_rel_to_it": mesh[int(k.split("-")[0][1:])][int(k.split("-")[1][4:])] / v - 1.0} for k, v in fine.items()}
(HERE / "analysis.json").write_text(json.dumps(out, indent=1))
print("| | " + " | ".join(f"H = {H}" for H in Hs) + " | b (95 % bootstrap) |")
for name in ("mesh", "tokens"):
    o = out[name]
    print(f"| {name} ({', '.join(map(str, o['paths']))} paths) | " + " | ".join(f"{m:.4g}" for m in o["means"])
          + f" | {o['b']:.3f} [{o['ci95'][0]:.3f}, {o['ci95'][1]:.3f}] |")
for k, v in out["finer_levels"].items():
    print(f"{k}: <G2> = {v['G2']:.4g}; level {e['level']} is {100 * v['level32_rel_to_it']:+.1f}% off it")
print("max |change| level", e["coarse_level"], "->", e["level"], ":", [f"{100 * c:.1f}%" for c in out["coarse_change_max"]])
