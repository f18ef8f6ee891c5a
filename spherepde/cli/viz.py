"""The ``render`` and ``plot`` subcommands (picked up by :func:`spherepde.cli.main.build_parser`).

    spherepde render RUN_DIR [--times T ...] [--gif | --mp4] [--frames N] [--fps F]
                     [--log] [--clim LO HI] [--camera iso|xy|xz|yz|x,y,z] [--multiview]
                     [--size W H] [--particles] [--interactive] [--out DIR]
    spherepde plot RUN_DIR [--out DIR] [--format png pdf svg] [--times T ...]
                   [--projection equirectangular|mollweide] [--log]

Both write into ``RUN_DIR/figures`` unless ``--out`` is given and print the files
written. Exit status as in :mod:`spherepde.cli.main`: 0 success, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

from spherepde.cli.common import fail


def _report(paths, quiet: bool) -> None:
    if not quiet:
        for p in paths:
            print(p)


def cmd_render(args) -> int:
    from spherepde.viz import render as viz

    if args.frames is not None and not (args.gif or args.mp4):
        return fail("--frames sets the length of an animation: add --gif or --mp4")
    kw = {
        "clim": args.clim, "log": args.log, "particles": args.particles or None, "camera": args.camera, "multiview": args.multiview,
        "window_size": tuple(args.size) if args.size else None, "cmap": args.cmap,
    }
    try:
        viz._camera(args.camera)  # reject a bad camera before any work
        if args.interactive:
            plotter = viz.interactive_viewer(args.run_dir, **kw)
            plotter.show(title=f"spherepde: {args.run_dir}")
            return 0
        written = []
        animate = args.gif or args.mp4
        if args.times or not animate:
            written += viz.render_snapshots(args.run_dir, args.times, args.out, **kw)
        if animate:
            snaps_kind = viz.run_kind(args.run_dir)
            out = Path(args.out) if args.out else Path(args.run_dir) / "figures"
            name = ("density" if snaps_kind == "mesh" else "tokens") + (".mp4" if args.mp4 else ".gif")
            written.append(viz.render_animation(args.run_dir, out / name, args.frames, fps=args.fps, progress=not args.quiet, **kw))
    except (FileNotFoundError, NotADirectoryError, ValueError, RuntimeError, ModuleNotFoundError) as exc:
        return fail(str(exc))
    _report(written, args.quiet)
    return 0


def cmd_plot(args) -> int:
    from spherepde.viz import plots

    try:
        written = plots.write_figures(args.run_dir, args.out, formats=args.format, times=args.times, projection=args.projection, log=args.log, dpi=args.dpi)
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        return fail(str(exc))
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
    r.add_argument("--times", nargs="+", type=float, metavar="T", help="PNG images at the snapshots nearest to these times (default without --gif/--mp4: first, middle, last)")
    anim = r.add_mutually_exclusive_group()
    anim.add_argument("--gif", action="store_true", help="write an animated GIF (density.gif or tokens.gif)")
    anim.add_argument("--mp4", action="store_true", help="write an MP4 movie (needs: pip install imageio-ffmpeg imageio)")
    r.add_argument("--frames", type=int, metavar="N", help="number of animation frames (default: every snapshot; more than the snapshots interpolates in time)")
    r.add_argument("--fps", type=float, default=10.0, help="animation frames per second (default 10)")
    r.add_argument("--log", action="store_true", help="logarithmic colour scale")
    r.add_argument("--clim", nargs=2, type=float, metavar=("LO", "HI"), help="colour range (default: min and max over all snapshots)")
    r.add_argument("--camera", default="iso", help="iso, xy (from +z), xz (from -y), yz (from +x) or a direction x,y,z; write --camera=-1,0,0 for a leading minus (default iso)")
    r.add_argument("--multiview", action="store_true", help="two views side by side: from the camera direction and from the opposite one")
    r.add_argument("--size", nargs=2, type=int, metavar=("W", "H"), help="image size in pixels (default 800 800; 1200 600 with --multiview)")
    r.add_argument("--particles", action="store_true", help="mesh runs: also draw the tokens stored with the snapshots")
    r.add_argument("--cmap", default="viridis", help="Matplotlib colour map name (default viridis)")
    r.add_argument("--interactive", action="store_true", help="open a window with a time slider (needs a display)")
    r.add_argument("--out", help="output folder (default RUN_DIR/figures)")
    common(r)
    r.set_defaults(func=cmd_render)

    p = sub.add_parser(
        "plot",
        help="2-D figures of a run or Monte-Carlo folder: energy, G², energy balance, mass, density maps",
        description="Write Matplotlib figures of a run folder (or of a Monte-Carlo folder: mean ± one standard deviation).",
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
