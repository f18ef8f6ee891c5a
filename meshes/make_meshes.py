"""Regenerate the small ready-made meshes shipped in this folder.

Run from anywhere:  ``python meshes/make_meshes.py``

* ``icosphere-{4,8,16}.npz`` -- ``spherepde.geometry.meshfiles.icosphere(n)`` saved with
  ``SphereMesh.save`` (points float64, cells int64, name); ``icosphere(n)`` rebuilds
  them bit for bit, so these files are a convenience, not a source of truth.
* ``uv-sphere.vtp`` -- ``pyvista.Sphere(radius=1, theta_resolution=24,
  phi_resolution=24)`` written unchanged, a non-icosahedral example (latitude-longitude
  triangulation with one point at each pole) that ``read_mesh`` cleans and validates.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
LEVELS = (4, 8, 16)


def main() -> None:
    import pyvista as pv

    from spherepde.geometry.meshfiles import icosphere, read_mesh

    for n in LEVELS:
        mesh = icosphere(n)
        mesh.save(HERE / f"icosphere-{n}.npz")
        print(f"icosphere-{n}.npz: {mesh.n_cells} cells, h = {mesh.h:.4f}")

    uv = pv.Sphere(radius=1.0, theta_resolution=24, phi_resolution=24)
    uv.save(HERE / "uv-sphere.vtp")
    mesh = read_mesh(HERE / "uv-sphere.vtp")
    ratio = mesh.quality()["area_ratio"]
    print(
        f"uv-sphere.vtp: {mesh.n_cells} cells, h = {mesh.h:.4f}, "
        f"area ratio = {ratio:.3f}"
    )


if __name__ == "__main__":
    main()
