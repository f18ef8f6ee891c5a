"""Finite-volume building blocks of the mesh solver (docs/model.md §1.3 and §4).

The Transformer PDE  d_t rho + div_S(rho v) = 0  on S^{d-1} is discretised with cell
averages rho_c on a geometry of :mod:`spherepde.geometry.protocol` (a triangulated S^2,
:class:`spherepde.geometry.mesh.SphereMesh`, is the one registered):

    d rho_c / dt = -(1/|C_c|) sum_{e in dC_c} s_ce |e| F_e,
    F_e = u_e^+ rho_c^e + u_e^- rho_n^e                                   (upwind)

where, for face (edge) e with ``edge_cells[e] = (c, n)``, u_e is the normal velocity along
``edge_normals[e]`` (pointing from c into n), s_ce = ``cell_face_signs`` and rho_c^e,
rho_n^e are the values of rho reconstructed at the face from the two sides
(Carrillo, Chertock & Huang, Commun. Comput. Phys. 17, 2015, adapted to the sphere).

Edge velocities (two forms, :func:`edge_velocity`):

* ``"potential"`` (gradient heads A_h = D_h, V_h = s D_h, default):
  u_e = s (Phi_n - Phi_c) / d_cn with Phi_c = (1/H) sum_h log Z_h(x_c), Z_h from the cell
  masses m_c = rho_c |C_c| at the cell nodes x_c, d_cn the geodesic node distance. This
  carries the energy structure to the mesh: with xi_c = dE/dm_c = (1/H) sum_h Z_h(x_c),

      dE/dt = sum_c xi_c dm_c/dt = sum_e |e| F_e (xi_n - xi_c),

  and F_e has the sign of u_e, i.e. of s (Phi_n - Phi_c). For H = 1, Phi = log xi is an
  increasing function of xi, so every term has the sign of s: the semi-discrete energy
  is monotone (non-increasing for s = -1, non-decreasing for s = +1). For H > 1 no
  sign is guaranteed (as for the continuous multi-head flow).
* ``"midpoint"`` (any heads): u_e = v(x_e) . n_e with v = (1/H) sum_h P_x V_h Y_h/Z_h
  evaluated at the edge midpoint x_e (one attention sum per edge: 1.5 n_c targets).

Unnormalised attention (docs/model.md "Unnormalised attention"): v = (1/H) sum_h P_x V_h Y_h
(no division by Z_h) = s grad_S xi for gradient heads, so the potential form uses xi itself,
u_e = s (xi_n - xi_c) / d_cn; then |e| F_e (xi_n - xi_c) = s |e| d_cn F_e u_e and every term of
dE/dt has the sign of s for every H (the mobility is 1), and the scheme's G^2 (:func:`scheme_g2`,
b_e = 1) equals s times the discrete transport rate exactly for every H.

The scheme is written against the geometry protocol
(:mod:`spherepde.geometry.protocol`): cells with nodes and measures, faces with their two
cells, measure, normal and node distance, the cell -> faces connectivity in CSR form (any
number of faces per cell) and the reconstruction the geometry owns. The cell nodes of a
triangulated sphere (circumcentres) and its reconstruction are described in
:mod:`spherepde.geometry.surface`.

Default: ``"potential"`` (on circumcentre nodes). Both forms are second-order consistent
(pointwise u_e and the linear growth rates gamma_l, ``tests/solvers/test_meshsolver.py``); the
potential form needs the attention sums at the n_c nodes only -- which the energy
diagnostics need at every stage anyway -- while the midpoint form adds 1.5 n_c
edge-midpoint targets (2.5x the work per stage for gradient heads), and the potential form
makes the semi-discrete energy exactly monotone for H = 1. The midpoint form is the one for
general (A, V) heads. The measurements behind this choice are in CHANGELOG.md.

Reconstruction (``order=2``): the geometry's limited linear reconstruction
(``geom.reconstruct``), values at the faces within [min, max] of rho over the cell and its
neighbours and averaging to rho_c. Transport order in h: 1 (``order=1``) and 2
(``order=2``) for a rigid rotation of a smooth density (the analytic validation study
measures it).

CFL bound (stability and positivity of one forward-Euler step; an SSP-RK step is
positive when every stage obeys it, which the solver checks):

* order 1: dt <= min_c |C_c| / sum_k |e_k| w_ck^+,  with w_ck = s_ck u_{e_k} the outflow
  speed of c across e_k (rho_c^new = rho_c (1 - dt sum_k |e_k| w_ck^+/|C_c|) + inflow >= 0);
* order 2: dt <= min_c min( |C_c| / (2 sum_k |e_k| w_ck^+),  rho_c |C_c| / sum_k |e_k| w_ck^+ rho_c^{e_k} ):
  half of the first-order bound (the analogue of the dt <= dx / (2 max|u|) of
  Carrillo--Chertock--Huang) AND the exact positivity limit of the Euler step with the
  reconstructed values (rho_c^new >= rho_c - dt/|C_c| sum_k |e_k| w_ck^+ rho_c^{e_k}).
  Half the first-order bound alone does not guarantee positivity on triangles: with one
  outflow edge the face value can reach ~2--3 rho_c. The second term is never below
  min_c |C_c| / (k_c max_k |e_k| w_ck^+) (k_c faces; 3 on triangles) because the
  reconstruction is mean-preserving (rho_c = (1/k_c) sum_k rho_c^{e_k}); for smooth data it
  is ~ the first-order bound, so in practice the bound is half the first-order one.

Token noise (nu Delta_S rho, the Scharfetter--Gummel flux and the step bound with the parabolic rate) is added to this
rhs and bound by :class:`spherepde.solvers.diffusion.MeshDiffusion`; without noise these kernels run alone.

Kernels (Numba, :mod:`spherepde._numba`): reconstruction, flux + divergence gather,
CFL bound. Each has a NumPy reference in :mod:`spherepde.solvers._reference` (tests only). The divergence is a
per-cell gather over the faces of the cell (CSR slots) after the face fluxes are stored, so no
two loop iterations write the same entry. Face values are arrays in slot order, shaped
``geom.slot_shape`` ((nc, 3) on a triangulated sphere).
"""

from __future__ import annotations

import math

import numpy as np

from spherepde._numba import njit, prange, serial_below
from spherepde.attention import attention_moments
from spherepde.geometry.protocol import Geometry, geometry_of
from spherepde.geometry.surface import FVGeometry, cell_nodes, fv_geometry

__all__ = [
    "DEFAULT_VELOCITY",
    "VELOCITY_FORMS",
    "FVGeometry",
    "cell_fields",
    "cell_nodes",
    "cell_potentials",
    "cfl_bound",
    "edge_velocity",
    "face_values",
    "flux_potential",
    "fv_geometry",
    "fv_rhs",
    "midpoint_edge_velocity",
    "potential_edge_velocity",
    "reconstruct",
    "rigid_rotation_edge_velocity",
    "scheme_g2",
    "with_scheme_g2",
]

#: Edge-velocity forms accepted by :func:`edge_velocity` and the mesh solver.
VELOCITY_FORMS = ("potential", "midpoint")
#: The default form (justified in the module docstring).
DEFAULT_VELOCITY = "potential"


# ------------------------------------------------------------- nonlocal quantities
def cell_fields(geom: Geometry, masses, A, *, want_q: bool = False, summation: str = "auto", tol: float = 1e-10,
                tol_moments: float | None = None, degree_rule: str = "adaptive", moments_by_mass: bool = True):
    """log Z_h, Y_h/Z_h (and Q_h/Z_h) at the cell nodes from the cell masses.

    Z_h(x_c) = sum_c' m_c' exp(x_c^T A_h x_c'), m_c = rho_c |C_c| at the nodes x_c
    (``geom.nodes``; docs/model.md §4). ``summation`` / ``tol``: direct, fast
    (spherical harmonics) or auto, see :func:`spherepde.attention.attention_moments`;
    ``tol_moments`` (default ``tol``) the accuracy of Ybar and Qbar alone on the fast path; ``degree_rule``
    how the fast path picks its degree (:func:`spherepde.attention.attention_moments`); ``moments_by_mass``: Ybar and
    Qbar feed only mass-weighted sums, so their tolerance is kept on average over the cell masses
    (``target_masses`` of :func:`~spherepde.attention.attention_moments`).

    Returns
    -------
    logZ (nc, H), Ybar (nc, H, 3), Qbar (nc, H) or None.
    """
    return attention_moments(geom.nodes, geom.nodes, masses, A, want_q=want_q, log=True, summation=summation, tol=tol,
                             tol_moments=tol_moments, degree_rule=degree_rule,
                             target_masses=masses if moments_by_mass else None)


def cell_potentials(geom: Geometry, masses, A) -> np.ndarray:
    """Phi_c = (1/H) sum_h log Z_h(x_c) at the cell nodes x_c, shape (nc,)."""
    logZ, _, _ = cell_fields(geom, masses, A)
    return logZ.mean(axis=1)


def flux_potential(logZ, *, normalised: bool = True) -> np.ndarray:
    """The potential of the two-point flux from log Z_h (nc, H): Phi = (1/H) sum_h log Z_h (softmax,
    ``normalised``) or xi = (1/H) sum_h Z_h (unnormalised attention), shape (nc,)."""
    return logZ.mean(axis=1) if normalised else np.exp(logZ).mean(axis=1)


def potential_edge_velocity(geom: Geometry, Phi, sign: float) -> np.ndarray:
    """u_e = s (Phi_n - Phi_c) / d_cn for ``edge_cells[e] = (c, n)``, shape (ne,) (d_cn = ``node_distances``)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    return sign * (Phi[n] - Phi[c]) / geom.node_distances


def midpoint_edge_velocity(geom: Geometry, masses, A, V, *, summation: str = "auto", tol: float = 1e-10,
                           normalised: bool = True) -> np.ndarray:
    """u_e = v(x_e) . n_e, v = (1/H) sum_h P_x V_h Y_h(x_e)/Z_h(x_e), shape (ne,) (``normalised`` False:
    unnormalised attention, v = (1/H) sum_h P_x V_h Y_h(x_e)).

    n_e is tangent at x_e, so the projection P_x drops out of the dot product.
    ``summation`` / ``tol`` as in :func:`cell_fields`.
    """
    logZ, Ybar, _ = attention_moments(geom.edge_midpoints, geom.nodes, masses, A, log=True, summation=summation, tol=tol)
    if not normalised:
        Ybar = Ybar * np.exp(logZ)[:, :, None]
    a = np.einsum("hkl,ehl->ek", V, Ybar) / V.shape[0]
    return np.einsum("ek,ek->e", a, geom.edge_normals)


def edge_velocity(geom: Geometry, form: str, masses, A, V, sign: float, logZ=None, *, summation: str = "auto", tol: float = 1e-10,
                  normalised: bool = True) -> np.ndarray:
    """Edge normal velocities in the chosen form (``"potential"`` or ``"midpoint"``), shape (ne,).

    ``logZ`` (nc, H) at the cell centres can be passed to avoid recomputing it for the
    potential form; ``normalised`` False: unnormalised attention (potential xi, :func:`flux_potential`).
    """
    if form == "potential":
        if logZ is None:
            logZ, _, _ = cell_fields(geom, masses, A, summation=summation, tol=tol)
        return potential_edge_velocity(geom, flux_potential(logZ, normalised=normalised), sign)
    if form == "midpoint":
        return midpoint_edge_velocity(geom, masses, A, V, summation=summation, tol=tol, normalised=normalised)
    raise ValueError(f"unknown edge velocity form {form!r}; use one of {VELOCITY_FORMS}")


def rigid_rotation_edge_velocity(geom_or_mesh, omega) -> np.ndarray:
    """Edge-averaged normal velocity of the rigid rotation v(x) = omega x x, shape (ne,).

    u_e = (1/|e|) int_e v . n_e ds = (psi(p_j) - psi(p_i)) / |e| with the stream function
    psi(x) = omega . x (v = grad psi x x), so the discrete divergence vanishes
    exactly (up to round-off): a test velocity for pure transport.
    """
    geom = geometry_of(geom_or_mesh)
    omega = np.asarray(omega, dtype=float)
    p = geom.vertices_of_edges
    flux = p[:, 1, :] @ omega - p[:, 0, :] @ omega  # int_e v.n ds for n ~ p_j x p_i
    return flux / geom.edge_lengths


# --------------------------------------------------------------------- the kernels
def reconstruct(geom: Geometry, rho) -> np.ndarray:
    """Limited linear reconstruction of rho at the faces, shape ``geom.slot_shape`` ((nc, 3) on a triangulated sphere).

    The geometry's own reconstruction (``geom.reconstruct``): value ``k`` of cell c is its
    value at face ``cell_faces[face_offsets[c] + k]``, within [min, max] of rho over the
    cell and its neighbours, and the values of a cell average to rho_c.
    """
    return geom.reconstruct(rho)


def face_values(geom: Geometry, rho, order: int) -> np.ndarray:
    """Face values rho_c^{e_k}, shape ``geom.slot_shape``: rho_c itself (order 1) or the reconstruction (order 2)."""
    if order == 1:
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        return np.repeat(rho, np.diff(geom.face_offsets)).reshape(geom.slot_shape)
    if order == 2:
        return reconstruct(geom, rho)
    raise ValueError(f"order must be 1 (upwind) or 2 (limited linear reconstruction), got {order!r}")


@njit
def divergence_kernel(flux, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, out):  # pragma: no cover
    """out_c = -(1/|C_c|) sum_k s_ck |e_k| F_{e_k}: the finite-volume update of the edge fluxes ``flux`` (ne,)."""
    nc = areas.shape[0]
    for c in range(nc):
        s = 0.0
        for j in range(face_offsets[c], face_offsets[c + 1]):
            e = cell_faces[j]
            s += cell_face_signs[j] * edge_lengths[e] * flux[e]
        out[c] = -s / areas[c]


@njit
def _fv_rhs_kernel(u, faces, face_slots, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, flux, out):  # pragma: no cover
    ne = u.shape[0]
    for e in range(ne):
        ue = u[e]
        if ue > 0.0:
            flux[e] = ue * faces[face_slots[e, 0]]
        else:
            flux[e] = ue * faces[face_slots[e, 1]]
    divergence_kernel(flux, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, out)


def fv_rhs(geom: Geometry, faces, u, *, flux=None, out=None) -> np.ndarray:
    """The semi-discrete update d rho_c/dt = -(1/|C_c|) sum_k s_ck |e_k| F_{e_k}, shape (nc,).

    Parameters
    ----------
    faces : face values in slot order, shape ``geom.slot_shape`` (:func:`face_values`).
    u : (ne,) normal velocities along ``edge_normals``.
    flux, out : optional preallocated (ne,) and (nc,) outputs; ``flux`` receives F_e.
    """
    u = np.ascontiguousarray(u, dtype=np.float64)
    faces = np.ascontiguousarray(faces, dtype=np.float64)
    if u.shape != (geom.n_edges,) or faces.shape != tuple(geom.slot_shape):
        raise ValueError(f"fv_rhs: expected u ({geom.n_edges},) and faces {tuple(geom.slot_shape)}, got {u.shape} and {faces.shape}")
    flux = np.empty(geom.n_edges) if flux is None else flux
    out = np.empty(geom.n_cells) if out is None else out
    _fv_rhs_kernel(u, faces.reshape(-1), geom.face_slots, geom.face_offsets, geom.cell_faces, geom.cell_face_signs, geom.edge_lengths, geom.areas, flux, out)
    return out


@njit
def _cfl_kernel(u, rho, faces, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, order, out):  # pragma: no cover
    nc = areas.shape[0]
    for c in range(nc):
        s1 = 0.0  # sum_k |e_k| w_ck^+                  (outflow speed)
        s2 = 0.0  # sum_k |e_k| w_ck^+ rho_c^k / rho_c  (relative outflow rate)
        for j in range(face_offsets[c], face_offsets[c + 1]):
            e = cell_faces[j]
            w = cell_face_signs[j] * u[e]
            if w > 0.0:
                f = edge_lengths[e] * w
                s1 += f
                if order == 2 and rho[c] > 0.0:
                    s2 += f * (faces[j] / rho[c])
        b = areas[c] / s1 if s1 > 0.0 else np.inf
        if order == 2:
            b = 0.5 * b
            if s2 > 0.0:
                bp = areas[c] / s2
                b = min(b, bp)
        out[c] = b


def cfl_bound(geom: Geometry, u, order: int, rho=None, faces=None) -> float:
    """The stability/positivity bound on dt for edge velocities u (ne,) (``inf`` for u = 0).

    With w_ck = s_ck u_{e_k} the outflow speed of cell c across its face k:

    * order 1: min_c |C_c| / sum_k |e_k| w_ck^+ ;
    * order 2: min_c min( |C_c| / (2 sum_k |e_k| w_ck^+),  rho_c |C_c| / sum_k |e_k| w_ck^+ rho_c^{e_k} ),
      i.e. half the first-order bound and the exact positivity limit of one Euler step
      with the reconstructed face values ``faces`` (needs ``rho`` and ``faces``). The
      limit is computed from the ratios rho_c^{e_k} / rho_c <= k_c (k_c faces, see
      :func:`reconstruct`), so it stays >= 1/k_c of the first-order bound even for tiny
      or subnormal rho_c.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    u = np.ascontiguousarray(u, dtype=np.float64)
    if order == 2:
        if rho is None or faces is None:
            raise ValueError("cfl_bound(order=2) needs the cell values rho and the reconstructed faces")
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        faces = np.ascontiguousarray(faces, dtype=np.float64).reshape(-1)
    else:
        rho = np.empty(0)
        faces = np.empty(0)
    out = np.empty(geom.n_cells)
    _cfl_kernel(u, rho, faces, geom.face_offsets, geom.cell_faces, geom.cell_face_signs, geom.edge_lengths, geom.areas, int(order), out)
    return float(out.min())


# ------------------------------------------------------- the scheme's metric slope
@njit(parallel=True)
def _scheme_g2_kernel(logZ, edge_cells, edge_lengths, node_distances, flux, u, out):  # pragma: no cover - compiled
    ne = u.shape[0]
    H = logZ.shape[1]
    for e in prange(ne):
        if flux[e] == 0.0 or u[e] == 0.0:
            out[e] = 0.0
            continue
        c = edge_cells[e, 0]
        n = edge_cells[e, 1]
        inv = 0.0  # (1/H) sum_h 1 / L(Z_hc, Z_hn)
        for h in range(H):
            la = logZ[c, h]
            dl = logZ[n, h] - la
            if abs(dl) < 1e-8:
                r = 1.0 - 0.5 * dl  # dl / expm1(dl) to O(dl^2)
            else:
                r = dl / math.expm1(dl)
            inv += math.exp(-la) * r
        out[e] = edge_lengths[e] * node_distances[e] * flux[e] * u[e] * H / inv


@njit(parallel=True)
def _scheme_g2_z_kernel(logZ, Z, edge_cells, edge_lengths, node_distances, flux, u, out):  # pragma: no cover - compiled
    """:func:`_scheme_g2_kernel` with Z = exp(log Z) given: 1 / L(a, b) = dl / (b - a), and for |dl| < 1e-2 the series
    (1/a)(1 - dl/2 + dl^2/12 - dl^4/720) of (1/a) dl / expm1(dl) (remainder < dl^6 / 30240 < 1e-16): no exp per edge."""
    ne = u.shape[0]
    H = logZ.shape[1]
    for e in prange(ne):
        if flux[e] == 0.0 or u[e] == 0.0:
            out[e] = 0.0
            continue
        c = edge_cells[e, 0]
        n = edge_cells[e, 1]
        inv = 0.0
        for h in range(H):
            dl = logZ[n, h] - logZ[c, h]
            if abs(dl) < 1e-2:
                d2 = dl * dl
                inv += (1.0 - 0.5 * dl + d2 / 12.0 - d2 * d2 / 720.0) / Z[c, h]
            else:
                inv += dl / (Z[n, h] - Z[c, h])
        out[e] = edge_lengths[e] * node_distances[e] * flux[e] * u[e] * H / inv


def scheme_g2(geom: Geometry, logZ, u, flux, *, normalised: bool = True, Z=None) -> float:
    """The metric slope G^2 of the finite-volume scheme (docs/model.md §3.4), a float.

        G^2_h = sum_e |e| d_cn F_e u_e b_e,   b_e = ( (1/H) sum_h 1 / L(Z_h(x_c), Z_h(x_n)) )^{-1},

    with F_e the scheme's flux (:func:`fv_rhs`), u_e the edge normal velocity, d_cn the node
    distance and L(a, b) = (b - a) / (log b - log a) the logarithmic mean. It is the
    discrete form of the paper's G^2 = int |v|^2 / ((1/H) sum_h 1/Z_h) dmu (the diamond of
    edge e has area |e| d_cn / 2 and u_e^2 averages |v|^2 / 2 over directions), and for
    the potential velocity u_e = s (Phi_n - Phi_c) / d_cn with one head it equals
    s * (the discrete transport rate sum_e |e| F_e (xi_n - xi_c)) exactly, because
    Z_n - Z_c = L(Z_c, Z_n) (log Z_n - log Z_c). So the paper-form balance closes on the
    mesh with the same accuracy as the exact chain-rule balance (for H = 1).

    Unnormalised attention (``normalised`` False): the mobility is 1, b_e = 1, so
    G^2_h = sum_e |e| d_cn F_e u_e, and with u_e = s (xi_n - xi_c) / d_cn it equals s times the
    discrete transport rate exactly for every H (module docstring).

    Parameters
    ----------
    logZ : (nc, H) log Z_h at the cell nodes; u : (ne,) edge velocities; flux : (ne,) F_e.
    Z : (nc, H) exp(log Z) when the caller has it (no exponential per edge and head; equal to round-off).
    """
    logZ = np.ascontiguousarray(logZ, dtype=np.float64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    flux = np.ascontiguousarray(flux, dtype=np.float64)
    if logZ.ndim != 2 or logZ.shape[0] != geom.n_cells or u.shape != (geom.n_edges,) or flux.shape != (geom.n_edges,):
        raise ValueError(f"scheme_g2: expected logZ ({geom.n_cells}, H), u and flux ({geom.n_edges},); got {logZ.shape}, {u.shape}, {flux.shape}")
    if not normalised:
        return float(np.sum(geom.edge_lengths * geom.node_distances * flux * u))
    out = np.empty(geom.n_edges)
    with serial_below(geom.n_edges * logZ.shape[1] / 2):  # an exp per edge and head: the threads pay from about 10^5
        if Z is None:
            _scheme_g2_kernel(logZ, geom.edge_cells, geom.edge_lengths, geom.node_distances, flux, u, out)
        else:
            Z = np.ascontiguousarray(Z, dtype=np.float64)
            if Z.shape != logZ.shape:
                raise ValueError(f"scheme_g2: Z {Z.shape} must match logZ {logZ.shape}")
            _scheme_g2_z_kernel(logZ, Z, geom.edge_cells, geom.edge_lengths, geom.node_distances, flux, u, out)
    return float(np.sum(out))


class _Rates(dict):
    """A state's rates (a dict) whose ``G2_scheme`` is computed when first read (``[]`` or ``get``): an implicit step
    reads it only where a record is written, an explicit stage at every stage (the energy balance's quadrature)."""

    _g2: tuple | None = None  # the arguments of scheme_g2 and the terms added to it, until computed

    def __missing__(self, key):
        if key != "G2_scheme" or self._g2 is None:
            raise KeyError(key)
        (geom, logZ, Z, u, flux, normalised, *extra), self._g2 = self._g2, None
        value = scheme_g2(geom, logZ, u, flux, normalised=normalised, Z=Z)
        for term in extra:
            value = value + term
        self["G2_scheme"] = value
        return value

    def get(self, key, default=None):
        return self[key] if key in self or (key == "G2_scheme" and self._g2 is not None) else default


def with_scheme_g2(rates: dict, geom: Geometry, logZ, u, flux, normalised: bool, *extra: float, now: bool = False, Z=None) -> dict:
    """``rates`` with ``G2_scheme`` = :func:`scheme_g2` (geom, logZ, u, flux) (+ ``extra``, the point masses' term),
    evaluated when first read -- the same bits as computing it at once (its arguments must not change meanwhile);
    ``now``: at once (the implicit stepper's legacy route, as before)."""
    out = _Rates(rates)
    out._g2 = (geom, logZ, Z, u, flux, normalised, *extra)
    if now:
        out["G2_scheme"]
    return out
