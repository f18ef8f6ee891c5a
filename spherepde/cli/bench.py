"""``spherepde bench [--json] [--quick]``: performance ratios measured side by side.

``spherepde bench --speed [--quick] [--only ENTRY ...] [--json] [--out FILE [--force]]``: the long
runs users wait for, each against the approach it replaced, with the accuracy held
(:mod:`spherepde.studies.speed`; ``--out benchmarks/speed.json`` is the file the performance page
of the documentation is written from).

What is measured, and how, is :mod:`spherepde.studies.benchmarks` and :mod:`spherepde.studies.speed`.
"""

from __future__ import annotations

import json
import os
import sys

from spherepde.studies.benchmarks import run_benchmarks


def _print_report(r: dict) -> None:
    m = r["machine"]
    print(f"spherepde bench{' (quick)' if r['quick'] else ''}: {m['cpu_count']} cores, Numba {m['numba_threads']} threads "
          f"({m['numba_threading_layer']}), load average {', '.join(f'{v:.1f}' for v in (m['load_average'] or []))}")
    print("(a) direct kernel vs NumPy blocks (np.exp + matmul)            target >= 8x")
    for x in r["a_direct_vs_numpy"]:
        print(f"    N = {x['N']:6d}  H = {x['H']}  targets {x['targets']:6d}: {x['speedup']:6.1f}x   "
              f"({x['ns_per_pair_direct']:.2f} vs {x['ns_per_pair_numpy']:.2f} ns per pair and head)")
    print("(b) fast vs direct summation, tol 1e-10, ||A||_2 <= 6           target >= 50x at N = 40962, err <= 1e-8")
    for x in r["b_fast_vs_direct"]:
        print(f"    N = {x['N']:6d}  H = {x['H']}  {x['density']:9s}: {x['speedup']:6.1f}x   max rel err Z {x['max_rel_err_Z']:.1e}, "
              f"max err v {x['max_err_v']:.1e}, degrees {x['degrees']}, rechecked {x['rechecked_pairs']}")
    print("(b') where summation = 'auto' switches to the fast sums (log form, with Q)")
    for x in r.get("b_auto_crossover", []):
        pred = "-" if x["predicted_speedup"] is None else f"{x['predicted_speedup']:.1f}x"
        print(f"    N = {x['N']:6d}  H = {x['H']:3d}: fast {x['speedup']:5.1f}x faster than direct (model {pred}); auto picks {x['auto_picks']}")
    c = r["c_mesh_step_scaling"]
    print(f"(c) mesh-solver step (fast sums, H = {c['H']}, {c['integrator']}) vs cells: exponent {c['exponent']:.2f}   target <= 1.2")
    for x in c["steps"]:
        print(f"    {x['cells']:6d} cells: {x['t_step_s'] * 1e3:8.1f} ms per step ({x['us_per_cell']:.1f} us per cell)")
    d = r["d_particles"]
    print(f"(d) particle step n = {d['n']}, H = {d['H']}, Euler: {d['speedup']:.1f}x vs batched NumPy "
          f"({d['t_step_solver_s'] * 1e3:.2f} vs {d['t_step_numpy_s'] * 1e3:.2f} ms); sums alone {d['speedup_sums_only']:.1f}x   target >= 5x")
    e = r["e_density_study"]
    print("(e) density-level paper OU study, H = 100, order 2, Euler (one step per 0.01)   goal: T = 20 path <= 300 s at 20,480 cells")
    for c in e["cases"]:
        p = c["projected_T20_s"]
        d = c["differences_vs_direct_after_2_steps"]["fused"]
        share = ", ".join(f"{k.strip('_').replace('_kernel', '')} {v:.0%}" for k, v in c["fused_time_share"].items())
        print(f"    {c['cells']:6d} cells: T = 20 path (projected from t = 0) {p['fused']:6.0f} s (NumPy route {p['numpy']:6.0f} s, direct {p['direct']:7.0f} s): "
              f"{c['speedup_vs_numpy']:.1f}x and {c['speedup_vs_direct']:.0f}x; vs direct rho {d['rho_max_rel']:.0e}, E {d['energy_rel']:.0e}, "
              f"G2 {d['G2_rel']:.0e}; time: {share}")
    print("(f) circle sums (d = 2, log form with Q, A = r I) vs direct, tol 1e-10")
    for x in r.get("f_circle_sums", []):
        print(f"    N = {x['N']:6d}  {x['layout']:6s} r = {x['r']:4.0f}: {x['speedup']:7.1f}x  ({x['path']}, order {x['order']}, "
              f"rechecked {x['rechecked_pairs']}); max err log Z {x['max_err_logZ']:.1e}, v {x['max_err_v']:.1e}")
    g = r.get("g_circle_vs_lax_friedrichs")
    if g:
        print(f"(g) circle, B's beta = {g['beta']:g} problem to T = {g['T']:g}, W1 to {g['ref_cells']} arcs   target >= 10x faster and closer")
        print(f"    Lax-Friedrichs {g['b_points']} points: {g['b_wall_s']:.2f} s ({g['b_steps']} steps), W1 {g['b_w1']:.2g}; density level "
              f"{g['cells']} arcs: {g['wall_s']:.2f} s ({g['steps']} steps), W1 {g['w1']:.2g}: {g['speedup']:.1f}x faster, W1 ratio {g['w1_ratio']:.2f}")
    print("targets met: " + ", ".join(f"{k} {'yes' if v else ('n/a' if v is None else 'NO')}" for k, v in r["targets_met"].items()))
    print(f"wall time {r['wall_time_s']:.0f} s")


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _print_speed(r: dict) -> None:
    m = r["machine"]
    print(f"spherepde bench --speed{' --quick' if r['quick'] else ''}: {m['cpu_count']} cores, Numba {m['numba_threads']} threads, "
          f"load average {', '.join(f'{v:.1f}' for v in (m['load_average'] or []))}")
    for key, e in r["entries"].items():
        met = {True: "target met", False: "target NOT met", None: "target n/a (quick)"}[e["target_met"]]
        print(f"{key}: {e['what']}")
        print(f"    {_fmt(e['ratio'])}x ({e['ratio_of']}; target {_fmt(e['target_ratio'])}x): {met}")
        print(f"    previous: {e['old']}")
        print(f"    today:    {e['new']}")
        acc = ", ".join(f"{k} {_fmt(v)}" for k, v in (e["accuracy"] or {}).items())
        print(f"    accuracy: {acc} (bound {e['accuracy_bound']})")
    print(f"wall time {r['wall_time_s']:.0f} s")


def _write_report(path: str, report: dict, force: bool) -> int:
    from pathlib import Path

    from spherepde._base import atomic_write_text

    out = Path(path)
    if out.exists() and not force:
        print(f"spherepde bench: {out} exists; pass --force to replace it (or choose another --out)", file=sys.stderr)
        return 2
    if not out.parent.is_dir():
        print(f"spherepde bench: folder {out.parent} does not exist (create it, or choose another --out)", file=sys.stderr)
        return 2
    atomic_write_text(out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def cmd_speed(args) -> int:
    from spherepde.studies.speed import ENTRIES, run_speed

    keys = [k for k, _, _ in ENTRIES]
    bad = [k for k in (args.only or []) if k not in keys]
    if bad:
        print(f"spherepde bench: unknown --only entry {', '.join(bad)}; choose from {', '.join(keys)}", file=sys.stderr)
        return 2
    if args.out and os.path.isdir(args.out):  # --force replaces a file, never a folder
        print(f"spherepde bench: {args.out} is a folder; --out takes a file (e.g. {os.path.join(args.out, 'speed.json')})", file=sys.stderr)
        return 2
    if args.out and os.path.exists(args.out) and not args.force:  # checked before the run too: never after a long run
        print(f"spherepde bench: {args.out} exists; pass --force to replace it (or choose another --out)", file=sys.stderr)
        return 2
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        print(f"spherepde bench: folder {os.path.dirname(args.out)} does not exist (create it, or choose another --out)", file=sys.stderr)
        return 2
    if args.force and not args.out:
        print("spherepde bench: --force goes with --out FILE", file=sys.stderr)
        return 2
    report = run_speed(args.quick, progress=None if args.json else (lambda s: print(s, file=sys.stderr)), only=args.only, out=args.out)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_speed(report)
    return _write_report(args.out, report, args.force) if args.out else 0




def cmd_bench(args) -> int:
    if getattr(args, "speed", False):
        return cmd_speed(args)
    if getattr(args, "only", None) or getattr(args, "out", None):
        print("spherepde bench: --only and --out go with --speed", file=sys.stderr)
        return 2
    if getattr(args, "force", False):
        print("spherepde bench: --force goes with --speed --out FILE", file=sys.stderr)
        return 2
    report = run_benchmarks(args.quick, progress=None if args.json else (lambda s: print(s, file=sys.stderr)))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(report)
    return 0


def register(sub, common) -> None:
    b = sub.add_parser("bench", help="performance ratios (--speed: the long runs against their previous approach; direct vs NumPy, fast vs direct, mesh-step scaling, particles, circle sums, circle vs Lax-Friedrichs)")
    b.add_argument("--json", action="store_true", help="print the report as JSON")
    b.add_argument("--quick", action="store_true", help="fewer sizes and heads (~20 s instead of ~4 min); with --speed: shortened problems")
    b.add_argument("--speed", action="store_true", help="the long runs users wait for (H = 100 path, implicit clustering probe, metastable tokens), "
                   "each against the approach it replaced, with the accuracy held")
    b.add_argument("--only", nargs="+", metavar="ENTRY", help="with --speed: only these entries (h100, implicit, tokens)")
    b.add_argument("--out", metavar="FILE", help="with --speed: also write the report as JSON to FILE (e.g. benchmarks/speed.json)")
    b.add_argument("--force", action="store_true", help="with --out: replace FILE if it exists")
    common(b)
    b.set_defaults(func=cmd_bench)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--speed", action="store_true")
    p.add_argument("--only", nargs="+")
    p.add_argument("--out")
    p.add_argument("--force", action="store_true")
    return cmd_bench(p.parse_args(argv))
