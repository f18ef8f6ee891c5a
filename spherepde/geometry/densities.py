"""Initial densities on a sphere mesh, as cell averages of mass 1 (docs/model.md §1.3, §4 and §7).

Every constructor returns ``rho`` of shape (nc,) with sum_c rho_c |C_c| = 1 (densities
with respect to surface area, so the uniform law is 1/(4 pi)).

Cell averages of smooth densities use sub-cell quadrature: each spherical triangle is
split k times into 4 (great-circle midpoints, 4^k sub-triangles that tile it exactly),
and each sub-triangle carries a 3-point rule (points (2/3, 1/6, 1/6) in barycentric
coordinates, projected to the sphere) weighted by a third of its exact spherical area.
k is chosen so that sub-triangles are about half the width of the narrowest feature
(1/sqrt(kappa) for von Mises--Fisher bumps, sigma for the octahedral law), so narrow,
under-resolved clusters still put the right mass into each cell. The averages are
finally renormalised to total mass exactly 1.

Constructors: :func:`uniform`, :func:`vmf_mixture`, :func:`octahedral`,
:func:`spherical_harmonic`, :func:`from_particles`, :func:`from_file`; helpers
:func:`cell_average`, :func:`normalise`, :func:`real_sph_harm`.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path

import numpy as np

from spherepde._base import load_arrays

__all__ = [
    "cell_average",
    "from_file",
    "read_start_file",
    "from_particles",
    "locate_cells",
    "normalise",
    "octahedral",
    "projected_normal_density",
    "real_sph_harm",
    "spherical_harmonic",
    "uniform",
    "vmf_density",
    "vmf_mixture",
]

log = logging.getLogger(__name__)

#: Largest number of sub-triangles the automatic choice of k allows for one mesh.
MAX_SUBTRIANGLES = 4_000_000
#: Sub-triangles processed at once (memory bound of the quadrature).
_CHUNK = 200_000


# ------------------------------------------------------------------------ helpers
def _mass(mesh, rho) -> float:
    return float(np.sum(rho * mesh.areas))


def normalise(mesh, rho) -> np.ndarray:
    """Return rho / sum_c rho_c |C_c| (a new float array of shape (nc,)).

    Raises
    ------
    ValueError
        If rho has the wrong shape, contains NaN/inf or negative values, or has zero mass.
    """
    rho = np.array(rho, dtype=np.float64, copy=True)
    nc = mesh.n_cells
    if rho.shape != (nc,):
        raise ValueError(f"density has shape {rho.shape}, but the mesh has {nc} cells; expected ({nc},)")
    bad = ~np.isfinite(rho)
    if bad.any():
        raise ValueError(f"density contains {int(bad.sum())} NaN/inf value(s), e.g. in cell {int(np.flatnonzero(bad)[0])}")
    if np.any(rho < 0):
        i = int(np.argmin(rho))
        raise ValueError(f"density must be non-negative; {int(np.sum(rho < 0))} cell(s) are negative, e.g. rho[{i}] = {rho[i]:.3e}")
    with np.errstate(over="ignore"):
        m = _mass(mesh, rho)
    if not np.isfinite(m):  # values near the float limit: their sum overflows; scaled by the largest first
        rho = rho / float(np.max(rho))
        m = _mass(mesh, rho)
    if not m > 0:
        raise ValueError("density has zero total mass (all cells are 0); it cannot be normalised to a probability density")
    return rho / m


def _spherical_areas(a, b, c):
    num = np.abs(np.einsum("ij,ij->i", a - c, np.cross(b - c, c)))
    den = 1.0 + np.einsum("ij,ij->i", a, b) + np.einsum("ij,ij->i", b, c) + np.einsum("ij,ij->i", c, a)
    return 2.0 * np.arctan2(num, den)


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _subdivide(tri: np.ndarray) -> np.ndarray:
    """(m, 3, 3) spherical triangles -> (4m, 3, 3) by great-circle edge midpoints."""
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    ab, bc, ca = _unit(a + b), _unit(b + c), _unit(c + a)
    return np.concatenate(
        [np.stack(t, axis=1) for t in ((a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca))], axis=0
    )


def _auto_subdivisions(mesh, scale: float | None) -> int:
    if scale is None or not np.isfinite(scale) or scale <= 0:
        k = 1
    else:
        k = max(1, math.ceil(math.log2(max(mesh.h / (0.5 * scale), 1.0))))
    kmax = max(1, math.floor(math.log(max(MAX_SUBTRIANGLES / mesh.n_cells, 4.0)) / math.log(4.0)))
    if k > kmax:
        log.debug("sub-cell quadrature capped at k = %d (wanted %d) on %d cells", kmax, k, mesh.n_cells)
    return int(min(k, kmax, 8))


def cell_average(mesh, f, *, subdivisions: int | None = None, scale: float | None = None) -> np.ndarray:
    """Cell averages (1/|C_c|) int_{C_c} f dsigma by sub-cell quadrature, shape (nc,).

    Parameters
    ----------
    mesh : SphereMesh.
    f : callable (m, 3) unit points -> (m,) values.
    subdivisions : k, the number of 4-fold splits of each cell (default: chosen from
        ``scale``, see the module docstring).
    scale : width of the narrowest feature of f (geodesic), used to choose k.
    """
    k = _auto_subdivisions(mesh, scale) if subdivisions is None else int(subdivisions)
    if k < 0:
        raise ValueError(f"subdivisions must be >= 0, got {k}")
    pts = np.asarray(mesh.points)
    cells = np.asarray(mesh.cells)
    nc = cells.shape[0]
    per = 4**k
    chunk = max(1, _CHUNK // per)
    out = np.empty(nc)
    bary = np.array([[2 / 3, 1 / 6, 1 / 6], [1 / 6, 2 / 3, 1 / 6], [1 / 6, 1 / 6, 2 / 3]])
    for s in range(0, nc, chunk):
        tri = pts[cells[s : s + chunk]]  # (m, 3, 3)
        m = tri.shape[0]
        for _ in range(k):
            tri = _subdivide(tri)
        # after subdivision the sub-triangles of cell i are rows i, i + m, i + 2m, ...
        area = _spherical_areas(tri[:, 0], tri[:, 1], tri[:, 2])
        q = _unit(np.einsum("qv,tvd->tqd", bary, tri)).reshape(-1, 3)
        vals = np.asarray(f(q), dtype=np.float64).reshape(-1, 3).mean(axis=1)
        integral = (vals * area).reshape(per, m).sum(axis=0)
        out[s : s + m] = integral / area.reshape(per, m).sum(axis=0)
    return out


# ---------------------------------------------------------------------- densities
def uniform(mesh) -> np.ndarray:
    """The uniform law: rho_c = 1/(4 pi) (exactly normalised on the mesh)."""
    return normalise(mesh, np.ones(mesh.n_cells))


def vmf_density(X, mean, kappa: float) -> np.ndarray:
    """von Mises--Fisher density on S^2: kappa / (4 pi sinh kappa) exp(kappa mean . x), (m,).

    Evaluated as kappa / (2 pi (1 - e^{-2 kappa})) exp(kappa (mean . x - 1)) (no overflow).
    """
    mu = np.asarray(mean, float)
    mu = mu / np.linalg.norm(mu)
    kappa = float(kappa)
    if kappa < 0:
        raise ValueError(f"vMF concentration must be >= 0, got {kappa}")
    if kappa < 1e-8:
        return np.full(X.shape[0], 1.0 / (4 * math.pi))
    c = kappa / (2 * math.pi * (-math.expm1(-2 * kappa)))
    return c * np.exp(kappa * (X @ mu - 1.0))


def vmf_mixture(mesh, means, kappas, weights=None, *, subdivisions: int | None = None) -> np.ndarray:
    """Mixture sum_i w_i vMF(mean_i, kappa_i) as normalised cell averages, (nc,).

    Parameters
    ----------
    means : (k, 3) mean directions (normalised here); kappas : (k,) or scalar, >= 0;
    weights : (k,) non-negative (normalised here; default equal).
    """
    means = np.atleast_2d(np.asarray(means, float))
    if means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"vMF means must have shape (k, 3), got {means.shape}")
    k = means.shape[0]
    kappas = np.broadcast_to(np.asarray(kappas, float), (k,))
    w = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, float)
    if w.shape != (k,) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"vMF weights must be {k} non-negative numbers with a positive sum, got {weights!r}")
    if np.any(kappas < 0) or not np.all(np.isfinite(kappas)):
        raise ValueError(f"vMF concentrations must be finite and >= 0, got {kappas}")
    if not np.all(np.isfinite(means)) or np.any(np.linalg.norm(means, axis=1) == 0):
        raise ValueError(f"vMF mean directions must be finite and non-zero, got {means.tolist()}")
    w = w / w.sum()
    scale = 1.0 / math.sqrt(max(float(kappas.max()), 1e-12))

    def f(X):
        return sum(wi * vmf_density(X, mi, ki) for wi, mi, ki in zip(w, means, kappas))

    rho = cell_average(mesh, f, subdivisions=subdivisions, scale=scale)
    if not np.sum(rho * mesh.areas) > 0:
        raise ValueError(
            f"vMF density: with kappa = {float(kappas.max()):g} every cell average underflows to 0 on this mesh "
            f"({mesh.n_cells} cells); use a smaller concentration (initial.kappas) or a finer mesh"
        )
    return normalise(mesh, rho)


def projected_normal_density(X, mean, sigma: float) -> np.ndarray:
    """Density on S^2 of y/|y| for y ~ N(mean, sigma^2 I), |mean| = 1 (exact), shape (m,).

    With t = mean . x:  p(x) = (2 pi sigma^2)^{-3/2} e^{-(1 - t^2)/(2 sigma^2)}
    [ (t^2 + sigma^2) sigma sqrt(pi/2) (1 + erf(t / (sigma sqrt 2))) + t sigma^2 e^{-t^2/(2 sigma^2)} ]
    (integrate r^2 times the Gaussian along the ray r x, r > 0).
    """
    from scipy.special import erf

    mu = np.asarray(mean, float)
    mu = mu / np.linalg.norm(mu)
    s2 = sigma * sigma
    t = X @ mu
    J0 = sigma * math.sqrt(math.pi / 2) * (1.0 + erf(t / (sigma * math.sqrt(2.0))))
    radial = (t * t + s2) * J0 * np.exp(-(1.0 - t * t) / (2 * s2)) + t * s2 * math.exp(-1.0 / (2 * s2))
    return radial / (2 * math.pi * s2) ** 1.5


def octahedral(mesh, sigma: float = 0.05, *, subdivisions: int | None = None) -> np.ndarray:
    """The paper's token law as a density (docs/model.md §7), normalised cell averages (nc,).

    A token picks one of the six vertices +-e_i with probability 1/6, adds N(0, sigma^2 I)
    noise and is normalised. The density of the normalised point is the EXACT
    projected-normal density (:func:`projected_normal_density`, not a vMF
    approximation), averaged over the 6 vertices; for small sigma each bump is close to
    a vMF with kappa = 1/sigma^2.
    """
    sigma = float(sigma)
    if not sigma > 0 or not np.isfinite(sigma):
        raise ValueError(f"octahedral: sigma must be a positive number, got {sigma}")
    verts = np.concatenate([np.eye(3), -np.eye(3)])

    def f(X):
        return sum(projected_normal_density(X, v, sigma) for v in verts) / 6.0

    return normalise(mesh, cell_average(mesh, f, subdivisions=subdivisions, scale=sigma))


def real_sph_harm(l: int, m: int, X) -> np.ndarray:
    """Real orthonormal spherical harmonic Y_lm at unit points X (n, 3), shape (n,).

    Y_l0 = Y_l^0;  Y_lm = sqrt(2) (-1)^m Re Y_l^m (m > 0);  Y_lm = sqrt(2) (-1)^m Im Y_l^|m| (m < 0),
    from scipy's complex Y_l^m (``sph_harm_y`` when available, else ``sph_harm``);
    int Y_lm Y_l'm' dsigma = delta.
    """
    import scipy.special as sp

    l, m = int(l), int(m)
    if l < 0 or abs(m) > l:
        raise ValueError(f"spherical harmonic needs l >= 0 and -l <= m <= l, got l = {l}, m = {m}")
    X = np.asarray(X, float)
    theta = np.arccos(np.clip(X[:, 2] / np.linalg.norm(X, axis=1), -1.0, 1.0))
    phi = np.mod(np.arctan2(X[:, 1], X[:, 0]), 2 * np.pi)
    am = abs(m)
    if hasattr(sp, "sph_harm_y"):
        Y = sp.sph_harm_y(l, am, theta, phi)
    else:  # pragma: no cover - older SciPy
        Y = sp.sph_harm(am, l, phi, theta)
    if m == 0:
        return np.real(Y)
    if m > 0:
        return math.sqrt(2.0) * (-1) ** m * np.real(Y)
    return math.sqrt(2.0) * (-1) ** m * np.imag(Y)


def spherical_harmonic(mesh, l: int, m: int, eps: float, *, subdivisions: int | None = None) -> np.ndarray:
    """rho = (1/(4 pi)) (1 + eps Y_lm) with the real harmonic Y_lm, as cell averages (nc,).

    Raises
    ------
    ValueError
        If 1 + eps Y_lm is negative somewhere (|eps| too large).
    """
    eps = float(eps)
    if not np.isfinite(eps):
        raise ValueError(f"eps must be finite, got {eps}")
    scale = math.pi / max(int(l), 1) / 2
    vals = cell_average(mesh, lambda X: real_sph_harm(l, m, X), subdivisions=subdivisions, scale=scale)
    # pointwise check on a fine point set (quadrature points and cell centres)
    test_pts = np.concatenate([np.asarray(mesh.centers), np.asarray(mesh.points)])
    Ymax = float(np.max(np.abs(real_sph_harm(l, m, test_pts))))
    lo = 1.0 + eps * np.concatenate([real_sph_harm(l, m, test_pts), vals])
    if np.min(lo) < 0:
        raise ValueError(
            f"spherical_harmonic: 1 + eps Y_{l}{m} is negative (min {np.min(lo):.3g}) with eps = {eps}; "
            f"the density must be >= 0, so use |eps| <= {1.0 / Ymax:.4g}"
        )
    return normalise(mesh, (1.0 + eps * vals) / (4 * math.pi))


@functools.lru_cache(maxsize=8)
def _center_tree(mesh):
    from scipy.spatial import cKDTree

    return cKDTree(np.asarray(mesh.centers))


def _contains(mesh, cells, X, tol=1e-12):
    """Whether each point X[i] lies in the spherical triangle cells[i] (outward CCW)."""
    p = np.asarray(mesh.points)
    tri = p[np.asarray(mesh.cells)[cells]]  # (m, 3, 3)
    ok = np.einsum("ij,ij->i", X, tri.sum(axis=1)) > 0
    for k in range(3):
        a, b = tri[:, k], tri[:, (k + 1) % 3]
        ok &= np.einsum("ij,ij->i", np.cross(a, b), X) >= -tol
    return ok


def locate_cells(mesh, X) -> np.ndarray:
    """Index of the cell containing each unit point of X (n, 3), shape (n,).

    Candidates are the nearest cell centres (scipy cKDTree), verified with the exact
    containment test det[a, b, x] >= 0 on the three great-circle edges. A point on an
    edge goes to the first candidate that contains it.
    """
    X = np.asarray(X, float)
    nc = mesh.n_cells
    kq = min(8, nc)
    _, cand = _center_tree(mesh).query(X, k=kq)
    cand = cand.reshape(X.shape[0], kq)
    out = np.full(X.shape[0], -1, dtype=np.int64)
    for j in range(kq):
        todo = np.flatnonzero(out < 0)
        if todo.size == 0:
            break
        ok = _contains(mesh, cand[todo, j], X[todo])
        out[todo[ok]] = cand[todo[ok], j]
    for i in np.flatnonzero(out < 0):  # pragma: no cover - very irregular meshes only
        ok = _contains(mesh, np.arange(nc), np.broadcast_to(X[i], (nc, 3)).copy(), tol=1e-10)
        if not ok.any():
            raise ValueError(f"point {X[i]} lies in no cell of the mesh")
        out[i] = int(np.flatnonzero(ok)[0])
    return out


def from_particles(mesh, X, weights=None) -> np.ndarray:
    """Histogram density of weighted points: rho_c = (sum of weights in C_c) / |C_c|, (nc,).

    Parameters
    ----------
    X : (n, 3) points (normalised here); weights : (n,) non-negative (default 1/n).
    """
    X = np.asarray(X, float)
    if X.ndim != 2 or X.shape[1] != 3 or X.shape[0] == 0:
        raise ValueError(f"particles must have shape (n, 3) with n >= 1, got {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("particles contain NaN or infinite coordinates")
    r = np.linalg.norm(X, axis=1)
    if np.any(r == 0):
        raise ValueError("particles at the origin cannot be projected to the sphere")
    X = X / r[:, None]
    w = np.full(X.shape[0], 1.0 / X.shape[0]) if weights is None else np.asarray(weights, float)
    if w.shape != (X.shape[0],):
        raise ValueError(f"particle weights have shape {w.shape}, expected ({X.shape[0]},)")
    cells = locate_cells(mesh, X)
    mass = np.bincount(cells, weights=w, minlength=mesh.n_cells)
    return normalise(mesh, mass / np.asarray(mesh.areas))


def with_noise(mesh, rho, amplitude: float, *, seed: int = 0, lmax: int = 8) -> np.ndarray:
    """rho * (1 + amplitude * f), normalised: f a random combination of the real spherical
    harmonics of degree 1..``lmax`` (coefficients N(0, 1/(2l+1)), seeded), scaled to
    max |f| = 1 at the cell centres. ``0 <= amplitude < 1`` keeps the density positive."""
    if not 0.0 <= amplitude < 1.0:
        raise ValueError(f"noise amplitude must lie in [0, 1), got {amplitude}")
    rng = np.random.default_rng(seed)
    X = np.asarray(mesh.centers, float)
    f = np.zeros(X.shape[0])
    for l in range(1, lmax + 1):
        for m in range(-l, l + 1):
            f += rng.normal() * real_sph_harm(l, m, X) / np.sqrt(2 * l + 1)
    f /= np.max(np.abs(f))
    return normalise(mesh, np.asarray(rho, float) * (1.0 + amplitude * f))


#: How far a token of a start file (``initial.file``, tokens (n, d)) may lie off the unit sphere: | |x| - 1 |.
TOKEN_RADIUS_TOL = 1e-6


def read_start_file(path, n_cells: int, d: int) -> np.ndarray:
    """``initial.file`` of a mesh run: cell densities (n_cells,) as stored, or tokens (n, d) on S^{d-1}.

    A ``.npy`` array, read by :func:`spherepde._base.load_arrays` (headers checked first, then
    memory-mapped: nothing large is allocated before the shape check). One-line ValueError for
    an array that is neither (n_cells,) nor (n, d), tokens of another d, an empty token array,
    NaN/inf values, or tokens off the sphere (| |x| - 1 | > :data:`TOKEN_RADIUS_TOL`)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a .npy file of cell densities")
    if not path.is_file():
        raise FileNotFoundError(f"density file not found: {path}")
    try:
        arr = load_arrays(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"cannot read {path} as a .npy array of cell densities (damaged, or not a .npy file): {' '.join(str(exc).split())}") from exc
    if isinstance(arr, np.lib.npyio.NpzFile):
        arr.close()
        raise ValueError(f"{path}: expected a .npy array of cell densities ({n_cells},) or tokens (n, {d}), got an .npz archive")  # noqa: TRY004
    if arr.ndim == 2 and arr.shape[1] != d:
        raise ValueError(f"{path}: tokens of shape {arr.shape} lie in d = {arr.shape[1]}, but this run has model.d = {d}; give tokens (n, {d})")
    if arr.shape != (n_cells,) and arr.ndim != 2:
        raise ValueError(f"{path}: density has shape {arr.shape}, but the mesh has {n_cells} cells (a token file holds (n, {d}))")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{path}: expected a real numeric array of cell densities or tokens, got dtype {arr.dtype}")
    arr = np.array(arr, dtype=np.float64)
    if arr.ndim == 2:
        _check_tokens(path, arr)
    return arr


def _check_tokens(path, X: np.ndarray) -> None:
    """Refuse an empty token array, NaN/inf, or points off the unit sphere (ValueError, one line)."""
    if X.shape[0] == 0:
        raise ValueError(f"{path}: tokens of shape {X.shape} hold no token; give at least one row (n >= 1)")
    bad = ~np.all(np.isfinite(X), axis=1)
    if bad.any():
        raise ValueError(f"{path}: {int(bad.sum())} token(s) hold NaN or infinite coordinates (first: row {int(np.argmax(bad))})")
    off = np.abs(np.linalg.norm(X, axis=1) - 1.0)
    if np.any(off > TOKEN_RADIUS_TOL):
        k = int(np.argmax(off))
        raise ValueError(f"{path}: {int(np.sum(off > TOKEN_RADIUS_TOL))} token(s) lie off the unit sphere S^{X.shape[1] - 1} (row {k}: | |x| - 1 | = {off[k]:.3g} "
                         f"> {TOKEN_RADIUS_TOL:g}); normalise the rows")


def from_file(mesh, path) -> np.ndarray:
    """The density of ``initial.file`` (:func:`read_start_file`, d = 3): cell values (nc,), normalised, or
    the histogram of tokens (n, 3) (:func:`from_particles`: mass 1/n per token in the cell containing it)."""
    arr = read_start_file(path, mesh.n_cells, 3)
    if arr.ndim == 2:
        return from_particles(mesh, arr)
    return normalise(mesh, arr)
