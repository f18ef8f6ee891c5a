"""``spherepde run`` and ``spherepde resume``: a configuration to a run folder, and on from its checkpoint."""

from __future__ import annotations

import json
import signal
import sys
import traceback
from contextlib import contextmanager

from spherepde.cli.common import fail, load_args_config
from spherepde.model.columns import HEADLINE_COLUMNS, MESH_HEADLINE_COLUMNS, PARTICLE_PREFIX, distance_columns, is_token_column


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM behaves like Ctrl-C: a KeyboardInterrupt (during a run, the runner's guard turns it into a checkpoint)."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _run_errors(args, call, *, before_start: str) -> int:
    """Call ``call()`` and map its outcome to an exit status: 0 done, 1 failed while running,
    2 bad input (nothing written), 130 interrupted. Errors are one line on stderr; the
    traceback of a failed run is in its run.log (and on screen with -v)."""
    from spherepde.runs import runner
    from spherepde.runs.config import ConfigError

    verbose = getattr(args, "verbose", 0)
    try:
        with _sigterm_as_interrupt():
            res = call()
    except runner.RunFailedError as exc:
        if verbose and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        return fail(str(exc), 1)
    except runner.RunAborted as exc:
        return fail(f"aborted by a second Ctrl-C; continue from the last checkpoint with: spherepde resume {exc.folder}", 130)
    except KeyboardInterrupt:
        return fail(before_start, 130)
    except (ConfigError, runner.RunExistsError, runner.RunFolderError, FileNotFoundError, ValueError) as exc:
        if verbose:
            traceback.print_exception(exc, file=sys.stderr)
        return fail(" ".join(str(exc).split()))
    except Exception as exc:  # anything else before the run started: nothing was written
        if verbose:
            traceback.print_exception(exc, file=sys.stderr)
        msg = " ".join(str(exc).split())
        return fail(f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__)
    return _report(res, args.quiet)


def cmd_run(args) -> int:
    from spherepde.runs import runner

    def call():
        from spherepde.runs.config import parse_override
        from spherepde.runs.names import run_name

        cfg = load_args_config(args)
        overrides = dict(parse_override(s) for s in (args.set or []))
        if args.out is None and overrides:  # the folder name says what --set changed
            cfg = cfg.with_overrides({"run.name": run_name(cfg, overrides)})
        progress = False if args.quiet else None
        with _compile_note(not args.quiet):
            if cfg.montecarlo.paths > 1:
                from spherepde.runs.montecarlo import monte_carlo

                return monte_carlo(cfg, out=args.out, force=args.force, progress=progress)
            return runner.run(cfg, out=args.out, force=args.force, progress=progress)

    return _run_errors(args, call, before_start="interrupted before the run started; nothing to resume")


@contextmanager
def _compile_note(enabled: bool):
    """One line on stderr at once when a run starts compiling spherepde's Numba kernels (the first
    run after an install, or in a fresh NUMBA_CACHE_DIR), instead of silence until they are
    compiled; nothing when they load from the cache."""
    try:
        from numba.core import event
    except ImportError:  # a Numba without the event API: no note
        enabled = False
    if not enabled:
        yield
        return

    class Note(event.Listener):
        said = False

        def on_start(self, ev):
            fn = getattr(ev.data.get("dispatcher"), "py_func", None) if isinstance(ev.data, dict) else None
            if not self.said and getattr(fn, "__module__", "").startswith("spherepde."):
                self.said = True
                print("compiling the kernels (the first run after an install; later runs load them)...", file=sys.stderr, flush=True)

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Note()):
        yield


def _report(res, quiet: bool) -> int:
    if res.status == "interrupted":  # the run said so (one line, with the resume command) when it stopped
        return 130
    if not quiet:
        from spherepde.runs.runfolder import SUMMARY_FILE

        summary = json.loads((res.folder / SUMMARY_FILE).read_text())
        fin = summary.get("final_mean", summary.get("final", {}))
        keys = [k for k in ("t", *HEADLINE_COLUMNS, *MESH_HEADLINE_COLUMNS) if k in fin]
        print(f"run {summary['status']}: {res.folder}")
        if summary.get("stopped") == "stationary":  # solver.steady_tol
            st = summary["stationary"]
            print(f"stopped as stationary at t = {st['t']:g} (max |d rho/dt| / max rho = {st['rate']:.3g} < solver.steady_tol = {st['steady_tol']:g})")
        if "wall_time_s" in summary:
            total, session = summary["wall_time_s"], summary.get("session_wall_time_s", summary["wall_time_s"])
            if session < total:  # a resumed run: this session's time, then the whole run's
                print(f"wall time: {session:.1f} s this session ({total:.1f} s in all since the run started)")
            else:
                print(f"wall time: {total:.1f} s")
        def num(v) -> str:
            return f"{v:.6g}" if v is not None else "undefined"

        if any(is_token_column(k) for k in fin):  # a both run: the mesh and its tokens side by side, then the distances
            print(f"  {'':15s} {'mesh':>12s} {'tokens':>12s}")
            for k in keys:
                p = PARTICLE_PREFIX + k
                print(f"  {k:15s} {num(fin[k]):>12s} {num(fin[p]) if p in fin else '':>12s}".rstrip())
            _print_distances(res.folder, fin)
        else:
            for k in keys:
                print(f"  {k:15s} {num(fin[k])}")
    return 0


def _print_distances(folder, fin: dict) -> None:
    """The final mesh-versus-token distances with their value at t = 0 (the sampling floor)."""
    from spherepde.runs.runfolder import DIAGNOSTICS_FILE, read_diagnostics

    cols = [c for c in distance_columns(fin) if fin.get(c) is not None]
    if not cols:
        return
    try:
        first = {c: float(v[0]) for c, v in read_diagnostics(folder / DIAGNOSTICS_FILE, malformed="raise").items() if c in cols and len(v)}
    except (OSError, ValueError):
        first = {}
    print("  distances between mesh and tokens (at t = 0, tokens drawn from the density: the floor):")
    for c in cols:
        print(f"  {c:15s} {fin[c]:.6g}" + (f"  (t = 0: {first[c]:.6g})" if c in first else ""))


def cmd_resume(args) -> int:
    def call():
        from spherepde.runs.config import parse_override

        overrides = dict(parse_override(s) for s in (args.set or []))
        from spherepde.runs.montecarlo import resume

        return resume(args.run_dir, progress=False if args.quiet else None, overrides=overrides, force=args.force)

    return _run_errors(args, call, before_start="interrupted before the run continued; the run folder is unchanged")


def register(sub, common) -> None:
    r = sub.add_parser("run", help="run a simulation from a TOML config (default: the built-in configuration)")
    r.add_argument("config", nargs="?", help="TOML configuration file (see 'spherepde config --show')")
    r.add_argument("--example", help="run a shipped example config (see 'spherepde config --list-examples')")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key, e.g. --set solver.T=2 (repeatable)")
    r.add_argument("--out", help="run folder (default: <run.out>/<run.name>)")
    r.add_argument("--force", action="store_true", help="replace an existing run folder (only a folder a spherepde run wrote; anything else is refused)")
    common(r)
    r.set_defaults(func=cmd_run)

    rs = sub.add_parser("resume", help="continue an interrupted run from its last checkpoint, or extend a run to a later time",
                        description="Continue RUN_DIR from its last checkpoint (bit for bit the uninterrupted run). "
                        "--set solver.T=T2 extends a run (finished or not) to a later time T2: the weight path continues "
                        "with the same noise stream, and the result equals a run made to T2 from the start.")
    rs.add_argument("run_dir")
    rs.add_argument("--set", action="append", metavar="solver.T=VALUE", help="extend the run to a later end time")
    rs.add_argument("--force", action="store_true", help="take over a run.lock written on another host (or one that is not a lock); a live process on this host is always refused")
    common(rs)
    rs.set_defaults(func=cmd_resume)
