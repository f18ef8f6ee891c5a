"""Token noise on the mesh: nu Delta_S rho by Scharfetter--Gummel fluxes (docs/model.md "Token noise").

With Brownian tokens of diffusivity nu > 0 the density solves (docs/model.md)

    d_t rho + div_S(rho v) = nu Delta_S rho.

Across face e = (c, n) (``edge_cells``; measure |e|, 1 for a point face on the circle; node
distance d = ``node_distances``; u_e the normal transport velocity from c into n) the
flux of the order-1 scheme is the Scharfetter--Gummel (exponential fitting) flux

    F_e = (nu/d) [B(-P) rho_c - B(P) rho_n],   B(x) = x / (e^x - 1),   P = u_e d / nu

(Scharfetter & Gummel, IEEE Trans. Electron Devices 16, 1969; for finite volumes Chatard 2011,
Bessemoulin-Chatard & Filbet, SIAM J. Sci. Comput. 34, 2012). With B(-x) = B(x) + x it is the
upwind flux plus a two-point diffusive flux of reduced diffusivity nu B(|P|) in (0, nu]:

    F_e = u_e^+ rho_c + u_e^- rho_n + D_e (rho_c - rho_n),   D_e = (nu/d) B(|P_e|)       (order 1)

so it is upwind as nu -> 0 (D_e -> 0), the two-point Laplace--Beltrami flux nu (rho_c - rho_n)/d
as u -> 0, and exact for the local equilibrium rho_n/rho_c = e^P: with the potential velocity
u_e = s (Phi_n - Phi_c)/d the flux vanishes for rho proportional to exp(s Phi/nu) (softmax:
Z^{s/nu}; unnormalised attention: exp(s xi/nu)). At order 2 the transport part keeps the
limited reconstruction (:mod:`spherepde.solvers.fv`) and the diffusive part is the central
two-point flux, D_e = nu/d (no reduction: the reconstructed transport has no first-order
numerical diffusion to compensate).

Step bounds (one forward-Euler step keeps rho >= 0; SSP-RK stages inherit it). With w_ck the
outflow speed of cell c across its face k (:func:`spherepde.solvers.fv.cfl_bound`):

* order 1: dt <= min_c |C_c| / sum_k |e_k| (w_ck^+ + D_k): rho_c's own coefficient in the Euler
  step is 1 - (dt/|C_c|) sum_k |e_k| (w_ck^+ + D_k) and every other coefficient is >= 0. Since
  D_k <= nu/d_k it is at least 1/(1/dt_CFL + 1/dt_par) with dt_par = min_c |C_c| / sum_k |e_k| nu/d_k
  the parabolic bound (O(h^2/nu)) and dt_CFL the upwind bound;
* order 2: dt <= min_c min(|C_c| / (2 s1_c + sD_c), |C_c| / (s2_c + sD_c)), s1_c = sum_k |e_k| w_ck^+,
  s2_c = sum_k |e_k| w_ck^+ rho_c^{e_k}/rho_c, sD_c = sum_k |e_k| nu/d_k: the transport bound of
  fv.cfl_bound with the parabolic rate added; the second term is the exact positivity limit
  (rho_c^new >= rho_c (1 - (dt/|C_c|)(s2_c + sD_c)), the inflows being >= 0).

The implicit step (:func:`spherepde.solvers.implicit.implicit_upwind_step` with ``nu``) adds
sum_e |e| D_e (1_c - 1_n)(1_c - 1_n)^T to the upwind matrix: non-positive off-diagonal entries,
column sums 0, so C + h K stays a column-diagonally-dominant M-matrix (positivity and mass for
any h).

Free energy (unnormalised attention, gradient heads): with mu_c = nu log rho_c - s xi_c the
discrete chain rule gives d/dt (-s E + nu sum_c |C_c| rho_c log rho_c) = -D_F (frozen weights),
D_F = sum_e |e| F_e (mu_c - mu_n) (:func:`noise_rates`), and at order 1 every term is >= 0:
F_e = (nu/d) B(P) (e^P rho_c - rho_n) with P = s (xi_n - xi_c)/nu has the sign of mu_c - mu_n.

Kernels (Numba): the diffusive flux and its divergence (a per-cell gather, as fv_rhs), the step
bound. :func:`sg_flux` is the plain NumPy form of the flux above (a reference for tests).
"""

from __future__ import annotations

import math

import numpy as np

from spherepde._numba import njit
from spherepde.geometry.protocol import Geometry
from spherepde.solvers.errors import OptionError
from spherepde.solvers.fv import divergence_kernel

__all__ = ["LOG_FLOOR", "MeshDiffusion", "bernoulli", "diffusion_coefficients", "entropy", "noise_rates", "sg_flux"]

#: The floor of rho inside log rho (the smallest positive normal double): D_F and mu stay finite at vacuum.
LOG_FLOOR = np.finfo(np.float64).tiny


def bernoulli(x) -> np.ndarray:
    """B(x) = x / (e^x - 1) elementwise (B(0) = 1; 1 - x/2 for |x| < 1e-8; 0 for large positive x)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.ones_like(x)
    big = np.abs(x) >= 1e-8
    with np.errstate(over="ignore"):
        out[big] = x[big] / np.expm1(x[big])
    out[~big] = 1.0 - 0.5 * x[~big]
    return out


def sg_flux(geom: Geometry, rho, u, nu: float) -> np.ndarray:
    """The Scharfetter--Gummel flux F_e = (nu/d)[B(-P) rho_c - B(P) rho_n], P = u_e d/nu, shape (ne,) (NumPy)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    d = geom.node_distances
    P = np.asarray(u, dtype=np.float64) * d / nu
    return (nu / d) * (bernoulli(-P) * rho[c] - bernoulli(P) * rho[n])


def diffusion_coefficients(geom: Geometry, u, nu: float, order: int) -> np.ndarray:
    """D_e of the module docstring, shape (ne,): (nu/d) B(|u_e d/nu|) at order 1, nu/d at order 2."""
    d = geom.node_distances
    if order == 2:
        return nu / d
    return (nu / d) * bernoulli(np.abs(np.asarray(u, dtype=np.float64)) * d / nu)


@njit
def _diffusion_kernel(rho, D, edge_cells, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, dflux, drhs):  # pragma: no cover
    ne = D.shape[0]
    for e in range(ne):
        dflux[e] = D[e] * (rho[edge_cells[e, 0]] - rho[edge_cells[e, 1]])
    divergence_kernel(dflux, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, drhs)


@njit
def _bound_kernel(u, D, rho, faces, face_offsets, cell_faces, cell_face_signs, edge_lengths, areas, order, out):  # pragma: no cover
    nc = areas.shape[0]
    for c in range(nc):
        s1 = 0.0  # sum_k |e_k| w_ck^+
        s2 = 0.0  # sum_k |e_k| w_ck^+ rho_c^k / rho_c
        sd = 0.0  # sum_k |e_k| D_k
        for j in range(face_offsets[c], face_offsets[c + 1]):
            e = cell_faces[j]
            sd += edge_lengths[e] * D[e]
            w = cell_face_signs[j] * u[e]
            if w > 0.0:
                f = edge_lengths[e] * w
                s1 += f
                if order == 2 and rho[c] > 0.0:
                    s2 += f * (faces[j] / rho[c])
        if order == 1:
            out[c] = areas[c] / (s1 + sd) if s1 + sd > 0.0 else np.inf
        else:
            b = areas[c] / (2.0 * s1 + sd) if 2.0 * s1 + sd > 0.0 else np.inf
            if s2 + sd > 0.0:
                b = min(b, areas[c] / (s2 + sd))
            out[c] = b


class MeshDiffusion:
    """nu Delta_S rho for the mesh solver at ``order`` 1 or 2 (module docstring); nu > 0.

    :meth:`add` adds the diffusive flux and its divergence to the transport flux and d rho/dt,
    :meth:`bound` is the combined step bound. :meth:`create` returns None for nu = 0 (the
    solver then runs the transport code alone, bit for bit).
    """

    def __init__(self, geom: Geometry, nu: float, order: int):
        self.geom, self.nu, self.order = geom, float(nu), int(order)

    @classmethod
    def create(cls, geom: Geometry, nu, order: int, *, atoms: bool = False) -> MeshDiffusion | None:
        """The diffusion of noise ``nu`` (None for 0); OptionError (option ``noise``) for a negative or non-finite
        nu, or nu > 0 with point masses."""
        try:
            nu = float(nu)
        except (TypeError, ValueError):
            raise OptionError("noise", f"noise must be a number nu >= 0, got {nu!r}") from None
        if not (nu >= 0.0 and math.isfinite(nu)):
            raise OptionError("noise", f"noise must be a finite number nu >= 0, got {nu!r}")
        if nu == 0.0:
            return None
        if atoms:
            raise OptionError("noise", "point masses and token noise do not mix (a point mass has infinite entropy); "
                                       "use atoms = False or noise = 0")
        return cls(geom, nu, order)

    def coefficients(self, u) -> np.ndarray:
        return diffusion_coefficients(self.geom, u, self.nu, self.order)

    def add(self, rho, u, rhs, flux=None) -> tuple[np.ndarray, np.ndarray]:
        """Add the diffusive flux to ``flux`` (ne,) (if given) and its divergence to ``rhs`` (nc,), in place;
        returns the diffusive parts (flux (ne,), d rho/dt (nc,))."""
        g = self.geom
        dflux, drhs = np.empty(g.n_edges), np.empty(g.n_cells)
        _diffusion_kernel(np.ascontiguousarray(rho, dtype=np.float64), self.coefficients(u), g.edge_cells, g.face_offsets,
                          g.cell_faces, g.cell_face_signs, g.edge_lengths, g.areas, dflux, drhs)
        rhs += drhs
        if flux is not None:
            flux += dflux
        return dflux, drhs

    def bound(self, u, rho, faces) -> float:
        """The step bound of the module docstring (transport and diffusion together)."""
        g = self.geom
        u = np.ascontiguousarray(u, dtype=np.float64)
        if self.order == 2:
            rho = np.ascontiguousarray(rho, dtype=np.float64)
            faces = np.ascontiguousarray(faces, dtype=np.float64).reshape(-1)
        else:
            rho, faces = np.empty(0), np.empty(0)
        out = np.empty(g.n_cells)
        _bound_kernel(u, self.coefficients(u), rho, faces, g.face_offsets, g.cell_faces, g.cell_face_signs, g.edge_lengths,
                      g.areas, self.order, out)
        return float(out.min())


def entropy(rho, areas) -> float:
    """sum_c |C_c| rho_c log rho_c (0 log 0 = 0)."""
    rho = np.asarray(rho, dtype=np.float64)
    pos = rho > 0
    return float(np.sum(areas[pos] * rho[pos] * np.log(rho[pos])))


def noise_rates(geom: Geometry, rho, xi, drhs, flux, nu: float, sign: float) -> dict:
    """The noisy mesh's energy rates at one state (module docstring):

    * ``diffusion`` = sum_c xi_c |C_c| (d rho_c/dt)_diffusion: the work of the diffusive flux against xi
      (the diffusion part of the chain-rule ``transport`` rate sum_c xi_c dm_c/dt);
    * ``DF`` = sum_e |e| F_e (mu_c - mu_n), mu = nu log max(rho, LOG_FLOOR) - s xi, F_e the total flux:
      the scheme's dissipation of the free energy -s E + nu sum |C| rho log rho (exactly minus its
      chain-rule rate at frozen weights; >= 0 at order 1 for unnormalised attention);
    * ``entropy`` = sum_c |C_c| rho_c log rho_c.
    """
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    mu = nu * np.log(np.maximum(rho, LOG_FLOOR)) - sign * xi
    return {"diffusion": float(np.sum(xi * geom.areas * drhs)),
            "DF": float(np.sum(geom.edge_lengths * flux * (mu[c] - mu[n]))),
            "entropy": entropy(rho, geom.areas)}
