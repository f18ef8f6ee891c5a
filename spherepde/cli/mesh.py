"""``spherepde mesh``: quality summary of an icosphere level or a mesh file (and conversion)."""

from __future__ import annotations

import json
import sys

from spherepde.cli.common import fail


def cmd_mesh(args) -> int:
    from spherepde.geometry.mesh import MeshError
    from spherepde.geometry.meshio import icosphere, read_mesh

    try:
        if args.file:
            mesh = read_mesh(args.file)
        else:
            mesh = icosphere(args.level)
    except (MeshError, FileNotFoundError) as exc:
        return fail(str(exc))
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
        from spherepde.geometry.meshio import write_mesh

        write_mesh(mesh, args.out)
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
