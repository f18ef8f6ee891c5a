"""More weight paths for the OU exponent of the full mesh_convergence run (issue 15).

Runs what ``spherepde.studies.mesh_convergence._exponent`` runs for paths j >= 3 (the
full report has j = 0, 1, 2): the same seeds (``mesh_convergence.path_seed``), mesh
level 32 and level 16 at order 2 with Euler, CFL 0.5, and 3 draws of 200 tokens (Heun) per path, T = 20, <G^2> over t >= 2.5. Appends one row per
run to results.csv (so an interrupted run keeps what it finished).

    python validation/exponent-more-paths/run.py H:FIRST:LAST [H:FIRST:LAST ...]
"""

import csv
import sys
import time
from pathlib import Path

from spherepde.geometry import densities
from spherepde.geometry.meshfiles import icosphere
from spherepde.model.statistics import time_average
from spherepde.solvers.particles import initial_tokens
from spherepde.studies import mesh_convergence as mc

P = mc.SIZES["full"]
OUT = Path(__file__).with_name("results.csv")
FIELDS = ["H", "path", "seed", "what", "level", "n", "sample", "G2_time_avg", "wall_s", "steps"]


def main(specs):
    mc.warm_up()
    T, wdt, ta = P["T"], P["weights_dt"], P["t_avg"]
    times = mc.record_times(T, P["record_dt"], wdt)
    meshes = {lv: (m := icosphere(lv), densities.octahedral(m, P["sigma0"])) for lv in (P["b_level"], P["b_coarse_level"])}
    new = not OUT.exists()
    with OUT.open("a", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        if new:
            w.writeheader()
        for spec in specs:
            H, first, last = (int(x) for x in spec.split(":"))
            for j in range(first, last + 1):
                seed = mc.path_seed(H, j)
                path = mc.ou_path(H, T, wdt, seed)
                for lv, (mesh, rho0) in meshes.items():
                    r = mc.run_mesh(mesh, rho0, path, times, order=P["b_order"], integrator=P["integrators"][str(P["b_order"])], cfl=P["cfl"])
                    w.writerow({"H": H, "path": j, "seed": seed, "what": "mesh", "level": lv, "n": "", "sample": "",
                                "G2_time_avg": time_average(times, r["G2"], ta), "wall_s": r["wall_s"], "steps": r["steps"]})
                    fh.flush()
                n = P["b_n"]
                for s in range(P["samples"]):
                    X0 = initial_tokens("octahedral", n, seed=mc.token_seed(j, n, s, H), sigma=P["sigma0"])
                    t0 = time.perf_counter()
                    r = mc.run_particles(X0, path, times, integrator=P["particle_integrator"])
                    w.writerow({"H": H, "path": j, "seed": seed, "what": "tokens", "level": "", "n": n, "sample": s,
                                "G2_time_avg": time_average(times, r["G2"], ta), "wall_s": time.perf_counter() - t0, "steps": ""})
                    fh.flush()
                print(f"H = {H} path {j} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
