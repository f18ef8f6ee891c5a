"""``spherepde export RUN --netcdf FILE``: a run (or Monte-Carlo or sweep) folder as one NetCDF-4 file.

The dataset is :func:`spherepde.runs.dataset.open_run` (a sweep folder: its results
table); it opens in xarray, ncview and ParaView alike.
"""

from __future__ import annotations

from spherepde.cli.common import fail


def cmd_export(args) -> int:
    from spherepde.runs.dataset import export_netcdf
    from spherepde.runs.runfolder import NotARunFolderError

    try:
        path = export_netcdf(args.run_dir, args.netcdf, force=args.force)
    except (FileNotFoundError, FileExistsError, NotARunFolderError, ValueError, OSError) as exc:
        return fail(str(exc))
    if not args.quiet:
        print(path)
    return 0


def register(sub, common) -> None:
    e = sub.add_parser("export", help="write a run, Monte-Carlo or sweep folder as a NetCDF-4 file (xarray, ncview, ParaView)",
                       description="Write RUN_DIR as one NetCDF-4 file with CF-style attributes: the density rho(time, cell) or "
                       "tokens x(time, token, xyz), cell centres and areas, every diagnostics column on its record times, the "
                       "weight path, and the resolved configuration and versions as attributes.")
    e.add_argument("run_dir", help="a run folder, a Monte-Carlo folder (paths stacked along 'path') or a sweep folder")
    e.add_argument("--netcdf", required=True, metavar="FILE", help="the NetCDF file to write (e.g. run.nc)")
    e.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    common(e)
    e.set_defaults(func=cmd_export)
