"""The ``render`` and ``plot`` subcommands (picked up by :func:`spherepde.cli.main.build_parser`).

    spherepde render RUN_DIR [--times T ...] [--gif | --mp4] [--frames N] [--fps F]
                     [--log] [--clim LO HI | auto | auto-log | minmax]
                     [--camera iso|xy|xz|yz|x,y,z] [--multiview] [--size W H]
                     [--particles | --no-particles] [--graticule] [--no-axes] [--lighting]
                     [--interactive] [--out DIR] [--force]
    spherepde plot RUN_DIR [--out DIR] [--format png pdf svg] [--times T ...]
                   [--projection equirectangular|mollweide] [--log]

Both write into ``RUN_DIR/figures`` unless ``--out`` is given and print the files
written. ``render`` names its files by time and options (``density_t16.000_log_iso.png``,
``density_lin_iso.gif``) and refuses to replace an existing file without ``--force``.
A time between snapshots is drawn at the nearest snapshot with a warning naming both
times; a time outside the snapshots is refused. Exit status as in
:mod:`spherepde.cli.main`: 0 success, 2 bad input.
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

from spherepde.cli.common import fail


def _report(paths, quiet: bool) -> None:
    if not quiet:
        for p in paths:
            print(p)


def _clim(values):
    """``--clim``: two numbers LO HI, or one of auto, auto-log, minmax (None: not given)."""
    from spherepde.viz.common import CLIM_MODES

    if values is None:
        return None
    if len(values) == 1 and values[0] in CLIM_MODES:
        return values[0]
    try:
        if len(values) == 2:
            return tuple(float(v) for v in values)
    except ValueError:
        pass
    raise ValueError(f"--clim takes two numbers LO HI or one of {', '.join(CLIM_MODES)}, got {' '.join(values)!r}")


def _out_problem(run_dir, out) -> str | None:
    """Why the figures of ``run_dir`` cannot go to ``out`` (None: RUN_DIR/figures), or None when they can: ``out``
    inside another run folder (only ``spherepde run`` and ``resume`` write there), a file, or a folder (or the
    nearest existing folder above it) this process may not write into. Checked before any work."""
    from spherepde.runs.runfolder import run_folder_above

    if not Path(run_dir).is_dir():
        return f"run folder {run_dir} " + ("is a file, not a run folder" if Path(run_dir).exists() else "does not exist")
    dest = Path(out) if out is not None else Path(run_dir) / "figures"
    if out is not None:
        inside = run_folder_above(dest.resolve())
        if inside is not None and inside != Path(run_dir).resolve():
            return f"--out {out} lies inside the run folder {inside}; only 'spherepde run' and 'resume' write into a run folder -- choose another --out"
    p = dest
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        return f"--out {dest}: {p} is a file, not a folder -- choose another --out" if p == dest else f"cannot create the output folder {dest}: {p} is a file -- choose another --out"
    if p.exists() and not os.access(p, os.W_OK | os.X_OK):
        return f"cannot write into {p} (read-only or no permission) -- choose another --out"
    return None


def _os_error(exc: OSError) -> int:
    """One line for a failed write of a figure (e.g. a full disk)."""
    where = f" {exc.filename}" if exc.filename else ""
    advice = "free some space, or choose another --out" if exc.errno == errno.ENOSPC else "choose another --out"
    return fail(f"cannot write{where}: {exc.strerror or exc} -- {advice}")


def cmd_render(args) -> int:
    from spherepde.viz import render as viz

    if args.frames is not None and not (args.gif or args.mp4):
        return fail("--frames sets the length of an animation: add --gif or --mp4")
    try:
        clim = _clim(args.clim)
    except ValueError as exc:
        return fail(str(exc))
    problem = None if args.interactive else _out_problem(args.run_dir, args.out)
    if problem:
        return fail(problem)
    kw = {
        "clim": clim, "log": args.log, "particles": args.particles, "camera": args.camera, "multiview": args.multiview,
        "window_size": tuple(args.size) if args.size else None, "cmap": args.cmap, "axes": args.axes, "graticule": args.graticule,
        "lighting": args.lighting,
    }
    try:
        viz._camera(args.camera)  # reject a bad camera and image size before any work
        viz._window(kw["window_size"], args.multiview)
        if args.interactive:
            plotter = viz.interactive_viewer(args.run_dir, **kw)
            plotter.show(title=f"spherepde: {args.run_dir}")
            return 0
        written = []
        animate = args.gif or args.mp4
        if args.times or not animate:
            written += viz.render_snapshots(args.run_dir, args.times, args.out, force=args.force, **kw)
        if animate:
            written.append(viz.render_animation(
                args.run_dir, None, args.frames, fps=args.fps, progress=not args.quiet, out_dir=args.out, movie="mp4" if args.mp4 else "gif",
                force=args.force, **kw,
            ))
    except FileExistsError as exc:
        return fail(str(exc).replace(" (force=True)", ""))
    except (FileNotFoundError, NotADirectoryError) as exc:
        return _os_error(exc) if exc.errno else fail(str(exc))
    except (ValueError, RuntimeError, ModuleNotFoundError) as exc:
        return fail(" ".join(str(exc).split()))  # one line, also for PyVista's multi-line messages (e.g. a bad --cmap)
    except OSError as exc:
        return _os_error(exc)
    _report(written, args.quiet)
    return 0


def cmd_plot(args) -> int:
    from spherepde.runs.compare import CompareError, check_dpi
    from spherepde.viz import plots

    try:
        check_dpi(args.dpi)
    except CompareError as exc:
        return fail(str(exc))
    problem = _out_problem(args.run_dir, args.out)
    if problem:
        return fail(problem)
    try:
        written = plots.write_figures(args.run_dir, args.out, formats=args.format, times=args.times, projection=args.projection, log=args.log, dpi=args.dpi)
    except (FileNotFoundError, NotADirectoryError) as exc:
        return _os_error(exc) if exc.errno else fail(str(exc))
    except ValueError as exc:
        return fail(str(exc))
    except OSError as exc:
        return _os_error(exc)
    _report(written, args.quiet)
    return 0


def register(sub, common) -> None:
    """Add ``render`` and ``plot`` to the ``spherepde`` subcommand parser."""
    r = sub.add_parser(
        "render",
        help="3-D images and animations of a run's density or tokens (PyVista, off-screen)",
        description="Render a run folder's snapshots on the sphere: PNG images at chosen times (nearest snapshot) "
        "and/or a GIF/MP4 animation with one colour scale for all frames. Off-screen unless --interactive.",
    )
    r.add_argument("run_dir", help="a run folder (from 'spherepde run')")
    r.add_argument("--times", nargs="+", type=float, metavar="T",
                   help="PNG images at the snapshots nearest to these times, with a warning when a time is not a snapshot time; "
                   "times outside the run are refused (default without --gif/--mp4: first, middle, last)")
    anim = r.add_mutually_exclusive_group()
    anim.add_argument("--gif", action="store_true", help="write an animated GIF, named by its options (e.g. density_lin_iso.gif)")
    anim.add_argument("--mp4", action="store_true", help="write an MP4 movie (needs: pip install imageio-ffmpeg imageio)")
    r.add_argument("--frames", type=int, metavar="N",
                   help="number of animation frames (default: every snapshot; more than the snapshots interpolates in time, "
                   "and those frames are labelled 'interpolated')")
    r.add_argument("--fps", type=float, default=10.0, help="animation frames per second (default 10)")
    r.add_argument("--log", action="store_true", help="logarithmic colour scale")
    r.add_argument("--clim", nargs="+", metavar="LIM",
                   help="colour range for all pictures: two numbers LO HI, or auto (default: up to the peak over all snapshots, on a log scale "
                   "when the peak is more than 50 times the median), auto-log (the same, always on a log scale) or minmax (min to max over all snapshots)")
    r.add_argument("--camera", default="iso", help="iso, xy (from +z), xz (from -y), yz (from +x) or a direction x,y,z; write --camera=-1,0,0 for a leading minus (default iso)")
    r.add_argument("--multiview", action="store_true", help="two views side by side: from the camera direction and from the opposite one")
    r.add_argument("--size", nargs=2, type=int, metavar=("W", "H"), help="image size in pixels (default 800 800; 1200 600 with --multiview)")
    r.add_argument("--particles", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the tokens stored with the snapshots on the density (default: whenever stored, e.g. run.solver = 'both'); --no-particles: the density alone")
    r.add_argument("--cmap", default="viridis", help="Matplotlib colour map name (default viridis)")
    r.add_argument("--graticule", action="store_true", help="draw lines of latitude and longitude every 30 degrees")
    r.add_argument("--axes", action=argparse.BooleanOptionalAction, default=True, help="x, y, z orientation axes in a corner (default on; --no-axes: none)")
    r.add_argument("--lighting", action="store_true",
                   help="shade the coloured sphere (default off: a density value has the same colour wherever its face points)")
    r.add_argument("--interactive", action="store_true", help="open a window with a time slider (needs a display)")
    r.add_argument("--out", help="output folder (default RUN_DIR/figures)")
    r.add_argument("--force", action="store_true", help="replace existing files of the same name (same time and options)")
    common(r)
    r.set_defaults(func=cmd_render)

    p = sub.add_parser(
        "plot",
        help="2-D figures of a run or Monte-Carlo folder: energy, G², energy balance, EDI residuals, mean resultant, mass, distances, density maps",
        description="Write Matplotlib figures of a run folder. A run.solver = 'both' run overlays mesh and tokens (energy, G², "
        "EDI residuals, mean resultant) and plots the distances between them labelled by method; a Monte-Carlo folder shows "
        "the mean with a band of one standard error and a 5-95 % quantile band over its paths.",
    )
    p.add_argument("run_dir", help="a run folder or a Monte-Carlo folder")
    p.add_argument("--out", help="output folder (default RUN_DIR/figures)")
    p.add_argument("--format", nargs="+", default=["png"], choices=["png", "pdf", "svg"], help="file formats (default png)")
    p.add_argument("--times", nargs="+", type=float, metavar="T", help="density/token maps at the snapshots nearest to these times (default: first, middle, last)")
    p.add_argument("--projection", default="equirectangular", choices=["equirectangular", "mollweide"], help="map projection (default equirectangular)")
    p.add_argument("--log", action="store_true", help="logarithmic colour scale for density maps")
    p.add_argument("--dpi", type=int, default=150, help="resolution of PNG output (default 150)")
    common(p)
    p.set_defaults(func=cmd_plot)
