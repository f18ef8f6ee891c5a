"""``spherepde steady``: the stationary states of the noisy model with one frozen head, continued in nu or beta.

    spherepde steady [--geometry sphere|circle] [--attention softmax|unnormalised] [--s 1|-1]
                     [--vary nu|beta] [--beta B] [--nu NU] [--range LO HI] [--points N]
                     [--mode L] [--nodes N] [--out FOLDER]

Sweeps the stable state down and up through the range (hysteresis), traces the nonuniform branch
from the linear threshold by pseudo-arclength continuation (folds), and writes ``steady.csv``,
``steady.png`` and ``steady.json`` into a new folder (an existing one is refused). Exit status 0,
or 2 for bad input (one line, nothing written).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spherepde.cli.common import fail

_COLUMNS = ("value", "order", "direction", "converged", "residual", "stable")


def _problem(args):
    from spherepde.model.stationary import GEOMETRY_D, SteadyProblem

    return SteadyProblem(GEOMETRY_D[args.geometry], args.attention, args.s, args.beta, args.nu)


def _check(args) -> str | None:
    """The first problem with the options, or None."""
    for name in ("beta", "nu"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0) or (name == "beta" and v > 200):
            return f"--{name} {v}: expected a positive number" + (" up to 200" if name == "beta" else "")
    if args.range is not None:
        lo, hi = args.range
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi) or (args.vary == "beta" and hi > 200):
            return f"--range {lo} {hi}: expected 0 < LO < HI" + (" <= 200 for beta" if args.vary == "beta" else "")
    if not 2 <= args.points <= 2000:
        return f"--points {args.points}: expected 2 to 2000 points per direction"
    if not 1 <= args.mode <= 8:
        return f"--mode {args.mode}: expected a degree (mode) from 1 to 8"
    if not 16 <= args.nodes <= 2000:
        return f"--nodes {args.nodes}: expected 16 to 2000 nodes of the reduction"
    return None


def _default_out(args) -> Path:
    fixed = f"beta{args.beta:g}" if args.vary == "nu" else f"nu{args.nu:g}"
    return Path(f"steady-{args.geometry}-{args.attention}-s{args.s:+d}-{args.vary}-{fixed}")


def _rows(sweeps, branch):
    for sw in sweeps:
        for v, st in zip(sw.values, sw.states, strict=True):
            yield (float(v), st.order, sw.direction, st.converged, st.residual, st.stable)
    for v, r, res, s in zip(branch.values, branch.order, branch.residual, branch.stable, strict=True):
        yield (float(v), float(r), "branch", True, float(res), bool(s))


def _hysteresis(sweeps, tol: float = 1e-3):
    """[lowest, highest] parameter value where the two sweeps' stable states differ (order parameters more
    than ``tol`` apart at the same value), or None: both directions saw the same states."""
    if len(sweeps) != 2:
        return None
    a, b = sweeps
    rb = {float(v): st.order for v, st in zip(b.values, b.states, strict=True)}
    differ = [float(v) for v, st in zip(a.values, a.states, strict=True) if float(v) in rb and abs(st.order - rb[float(v)]) > tol]
    return [min(differ), max(differ)] if differ else None


def cmd_steady(args) -> int:
    import numpy as np

    from spherepde._base import atomic_write_text
    from spherepde.model import continuation as cont
    from spherepde.model.stationary import ReducedGrid, published_threshold, tricritical_beta

    problem_text = _check(args)
    if problem_text:
        return fail(problem_text)
    out = Path(args.out) if args.out else _default_out(args)
    if out.exists():
        return fail(f"--out {out}: already exists; give a new folder (spherepde steady never overwrites one)")
    p = _problem(args)
    lam_c = cont.threshold(p, args.vary, args.mode)
    if args.range is None:
        if not math.isfinite(lam_c):
            why = "s = -1 has no threshold" if p.s < 0 else f"no {args.vary} threshold at these settings"
            return fail(f"{why}; give the range with --range LO HI")
        lo, hi = 0.5 * lam_c, 1.5 * lam_c
        if args.vary == "beta":
            hi = min(hi, 200.0)
    else:
        lo, hi = args.range
    grid = ReducedGrid(p.d, args.nodes)
    values = np.linspace(lo, hi, args.points)
    if args.mode == 1:
        down = cont.sweep(p, args.vary, values[::-1], grid=grid)
        up = cont.sweep(p, args.vary, values, grid=grid, start=down.states[-1].rho)
        sweeps = (up, down) if args.vary == "beta" else (down, up)  # the sweep into the clustered side first
    else:  # the stable states are the mode-1 ones: only the degree-l branch is traced
        sweeps = ()
    branch = cont.trace_branch(p, args.vary, lo, hi, grid=grid, mode=args.mode)

    out.mkdir(parents=True)
    lines = [",".join((args.vary, *_COLUMNS[1:]))]
    for v, r, d, c, res, s in _rows(sweeps, branch):
        lines.append(f"{v:.12g},{r:.12g},{d},{str(c).lower()},{res:.3g},{str(s).lower()}")
    atomic_write_text(out / "steady.csv", "\n".join(lines) + "\n")
    summary = {
        "geometry": args.geometry, "attention": args.attention, "s": p.s, "vary": args.vary, "beta": p.beta, "nu": p.nu, "mode": args.mode,
        "range": [lo, hi], "points": args.points, "nodes": args.nodes,
        "threshold": lam_c if math.isfinite(lam_c) else None, "transition": branch.transition,
        "folds": [{"value": f.value, "order": f.order} for f in branch.folds],
        "hysteresis": _hysteresis(sweeps),
        "converged": all(st.converged for sw in sweeps for st in sw.states) and branch.converged,
    }
    if not p.normalised and args.mode == 1:
        summary["tricritical_beta"] = tricritical_beta(p.d)
        if args.vary == "nu":
            summary["published_threshold"] = published_threshold(p.beta, p.d)
    atomic_write_text(out / "steady.json", json.dumps(summary, indent=2) + "\n")
    from spherepde.viz.steady import plot_steady

    fixed = f"β = {p.beta:g}" if args.vary == "nu" else f"ν = {p.nu:g}"
    title = f"{args.attention}, S^{p.d - 1}, s = {p.s:+d}, {fixed}"
    plot_steady(sweeps, branch, title=title, mode=args.mode).savefig(out / "steady.png", dpi=120)

    sym = "nu" if args.vary == "nu" else "beta"
    if math.isfinite(lam_c):
        print(f"linear threshold: {sym}_c = {lam_c:.6g} (mode {args.mode})")
    else:
        print("linear threshold: none (the uniform state is stable " + ("for every nu and beta: s = -1)" if p.s < 0 else f"at every {sym})"))
    if "tricritical_beta" in summary:
        extra = f"; Mun & Rosenzweig's nu_c = beta/(2 K_#) = {summary['published_threshold']:.6g}" if "published_threshold" in summary else ""
        print(f"Mun & Rosenzweig: continuous for beta <= beta_* = {summary['tricritical_beta']:.6g}, discontinuous above{extra}")
    print(f"transition: {branch.transition}" + ("" if branch.folds else (" (no fold in the range)" if branch.values.size else "")))
    for f in branch.folds:
        print(f"fold: {sym} = {f.value:.6g} (order parameter {f.order:.4g})")
    if not sweeps:
        print(f"sweeps: none for --mode {args.mode} (the stable states are those of mode 1)")
    elif summary["hysteresis"]:
        a, b = summary["hysteresis"]
        if a == b:
            print(f"hysteresis: the up and down sweeps settle on different states at {sym} = {a:.6g} only (one sweep point: "
                  "more --points resolve the window)")
        else:
            print(f"hysteresis: the up and down sweeps settle on different states for {sym} from {a:.6g} to {b:.6g}")
    else:
        print("hysteresis: none (both sweeps settle on the same states)")
    if not summary["converged"]:
        print("warning: some states did not converge (see the 'converged' column)")
    print(f"wrote {out / 'steady.csv'}, {out / 'steady.png'}, {out / 'steady.json'}")
    return 0


def register(sub, common) -> None:
    from spherepde.model.stationary import GEOMETRY_D
    from spherepde.model.velocity import ATTENTION_KINDS

    s = sub.add_parser("steady", help="stationary states of the noisy model with one frozen head, continued in nu or beta (hysteresis, folds)",
                       description="Stationary densities of d_t rho + div(rho v) = nu Delta rho with one frozen gradient head D = beta I, from the "
                                   "self-consistency equation, followed up and down in nu or beta (docs/guide/noise.md).")
    s.add_argument("--geometry", choices=sorted(GEOMETRY_D), default="sphere", help="S^2 (sphere) or S^1 (circle); default sphere")
    s.add_argument("--attention", choices=ATTENTION_KINDS.names(aliases=True), default="softmax", help="attention kind; default softmax")
    s.add_argument("--s", type=int, choices=(1, -1), default=1, help="sign of the head: +1 clustering (default), -1 repulsive")
    s.add_argument("--vary", choices=("nu", "beta"), default="nu", help="the parameter to continue in; default nu")
    s.add_argument("--beta", type=float, default=4.0, help="beta when nu varies (default 4)")
    s.add_argument("--nu", type=float, default=0.5, help="nu when beta varies (default 0.5)")
    s.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"), help="range of the varied parameter (default 0.5 to 1.5 times its threshold)")
    s.add_argument("--points", type=int, default=41, help="points per sweep direction (default 41)")
    s.add_argument("--mode", type=int, default=1, help="degree l (S^2) or mode k (S^1) of the branch (default 1)")
    s.add_argument("--nodes", type=int, default=128, help="nodes of the axially symmetric reduction (default 128)")
    s.add_argument("--out", help="new output folder (default steady-GEOMETRY-ATTENTION-sS-VARY-FIXED)")
    common(s)
    s.set_defaults(func=cmd_steady)
