"""``spherepde mesh``: quality summary of an icosphere level or a mesh file (and conversion)."""

from __future__ import annotations

import json
import sys

from spherepde.cli.common import fail


def cmd_mesh(args) -> int:
    from pathlib import Path

    from spherepde._base import available_memory, format_bytes
    from spherepde.geometry.mesh import PYVISTA_EXTENSIONS, MeshError
    from spherepde.geometry.meshfiles import icosphere, icosphere_bytes, read_mesh
    from spherepde.runs.config import ConfigError

    if args.out and Path(args.out).suffix.lower() not in (".npz", *PYVISTA_EXTENSIONS):
        return fail(f"--out {args.out}: unsupported mesh file extension; use .npz or one of {', '.join(PYVISTA_EXTENSIONS)}")
    try:
        if args.file:
            mesh = read_mesh(args.file)
        else:
            if args.level >= 1:
                need = icosphere_bytes(args.level)
                limit, source = available_memory()
                if need > limit:
                    return fail(
                        f"level {args.level}: the icosphere has {20 * args.level**2:.3g} cells and needs about {format_bytes(need)} "
                        f"of memory, but {format_bytes(limit)} is {source}; use a smaller level"
                    )
            mesh = icosphere(args.level)
    except (MeshError, FileNotFoundError, ConfigError) as exc:
        return fail(" ".join(str(exc).split()))
    q = mesh.quality()
    if args.json:
        print(json.dumps(q, indent=2))
    else:
        print(f"mesh {q['name']}")
        print(f"  cells      {q['n_cells']}")
        print(f"  edges      {q['n_edges']}")
        print(f"  vertices   {q['n_vertices']}")
        print(f"  area total {q['area_total']:.15f}  (4 pi = 12.566370614359172)")
        print(f"  area ratio {q['area_ratio']:.4f}  (min/max)")
        print(f"  h          {q['h']:.6f}  (max great-circle edge length)")
    if args.out:
        from spherepde.geometry.meshfiles import write_mesh

        try:
            write_mesh(mesh, args.out)
        except (OSError, ValueError) as exc:
            return fail(f"--out {args.out}: cannot write the mesh: {' '.join(str(exc).split())}")
        print(f"written {args.out}", file=sys.stderr)
    return 0


def register(sub, common) -> None:
    m = sub.add_parser("mesh", help="mesh quality summary (icosphere level or a mesh file)")
    m.add_argument("level", nargs="?", type=int, default=16, help="icosphere subdivision n (20 n^2 cells; default 16)")
    m.add_argument("--file", help="read a mesh file instead (.npz/.vtp/.vtk/.ply/.obj/.stl)")
    m.add_argument("--json", action="store_true", help="print JSON")
    m.add_argument("--out", help="also write the mesh to this file")
    common(m)
    m.set_defaults(func=cmd_mesh)
