"""Energy, dissipation and the energy-dissipation identity (docs/model.md §3).

All functions take a weighted point cloud: points x_i in R^d (unit) with weights w_i
(1/n for tokens, cell masses m_c = rho_c |C_c| on the mesh), so the particle and the
mesh solver share one implementation and report the same columns.

For gradient heads (A_h = D_h, V_h = s D_h):

    E        = (1/(2H)) sum_h sum_i w_i Z_h(x_i)
    d_tE     = (1/(2H)) sum_h sum_ij w_i w_j e^{x_i D_h x_j} [x_i^T f_h x_j + (sigma^2/4)(1 + (x_i.x_j)^2)]
    dM       = (1/(2H)) sum_h sum_ij w_i w_j e^{x_i D_h x_j} x_i^T dM_h x_j       (Ito, left point)
    grad xi  = (1/H) sum_h P_x D_h Y_h(x),          xi = dE/dmu = (1/H) sum_h Z_h
    v        = (1/H) sum_h P_x V_h Y_h(x) / Z_h(x)   (= s grad_S Phi,  Phi = (1/H) sum_h log Z_h)
    transport = sum_i w_i grad xi(x_i) . v(x_i)     (chain-rule term)
    G2       = sum_i w_i |v(x_i)|^2 / ((1/H) sum_h 1/Z_h(x_i))   (harmonic-mean mobility)

Unnormalised attention (``attention="unnormalised"``, docs/model.md "Unnormalised attention"):
v = (1/H) sum_h P_x V_h Y_h(x) = s grad_S xi, the mobility is 1 for every head and

    G2       = sum_i w_i |v(x_i)|^2,   transport = s G2   (exactly, for every H)

(E, d_tE, the martingale and grad xi are the same functions of the measure for both kinds).

with Y_h(x) = sum_j w_j e^{x D_h x_j} x_j (see :mod:`spherepde.attention.direct`).

The running balance (:class:`EnergyBalance`) reports the residuals (J_t: the energy of
collapses and merges of point masses, ``int_collapse_energy``; W_t: the energy's change
through the weights, ``int_dE_weights``; docs/model.md §3.6):

    edi_exact     = E(t) - E(0) - J_t - int d_tE - int transport - M_t   (-> 0 as dt -> 0, any H)
    edi_paper     = E(t) - E(0) - J_t - int d_tE - s int G2 - M_t        (paper's form; exact for H = 1)
    edi_transport = E(t) - E(0) - J_t - W_t - int transport              (the solver: discrete chain rule)
    edi_weights   = W_t - int d_tE - M_t                                 (the weight path: Ito's formula)

so edi_exact = edi_transport + edi_weights (for s = -1 the paper's form reads
E(T) - E(0) = int d_tE - int G2 + M_T). W_t sums over the steps the trapezoid rule
(1/2)(w_n + w_{n+1}) of w_j = (1/(2H)) sum_h <D_h(t_{n+1}) - D_h(t_n), M_h> with M_h the moments
of the state at t_j (:func:`weights_work`): the change of E along the step's chord of the weight path.

Token noise nu > 0 (mesh; docs/model.md "Token noise"): the chain-rule ``transport`` includes the diffusion, whose part
is ``diffusion`` (the work of the diffusive flux against xi). For unnormalised attention with gradient heads the flow is
the gradient flow of the free energy F = -s E + nu S, S = int rho log rho (``entropy``), with dissipation
D_F = int rho |grad(nu log rho - s xi)|^2 (``DF``; the mesh: the scheme's own, from its fluxes,
:func:`spherepde.solvers.diffusion.noise_rates`), and

    edi_free = F(t) - F(0) + s int d_tE + int D_F + s M_t      (-> 0 as dt -> 0; frozen weights: F(t) - F(0) + int D_F).

Softmax heads have no such structure (the transport's mobility is 1/Z_h, the diffusion's 1): their free-energy
columns are NaN and the balance reports the transport and diffusion parts separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spherepde.model.columns import ENERGY_COLUMNS
from spherepde.model.velocity import DEFAULT_ATTENTION, HeadFields, is_normalised, project

__all__ = [
    "state_rates",
    "martingale_increment",
    "weights_work",
    "weights_change",
    "mean_resultant_length",
    "EnergyBalance",
]


def state_rates(X, w, fields: HeadFields, D, f, sigma: float, v=None, *, attention: str = DEFAULT_ATTENTION) -> dict:
    """Instantaneous energy quantities of a weighted cloud for gradient heads.

    Parameters
    ----------
    X : (n, d) points; w : (n,) weights summing to 1.
    fields : head fields at X (with Q when sigma > 0).
    D : (H, d, d) symmetric matrices; f : (H, d, d) drift f_h(D_h, t); sigma : noise level.
    v : (n, d) velocity at X (computed from the fields with V = s D when omitted is not
        possible, so pass it).
    attention : the attention kind of ``v`` (:data:`~spherepde.model.velocity.ATTENTION_KINDS`): it sets
        the mobility of G2, (1/H) sum_h 1/Z_h for softmax, 1 for unnormalised attention.

    Returns
    -------
    dict with energy, dEdt_partial, transport, G2, xi (n,), grad_xi (n, d) and the moments
    M (H, d, d), M_h = sum_i w_i x_i Y_h(x_i)^T = 2H dE/dD_h.
    """
    H = D.shape[0]
    Z, Y = fields.Z, fields.Y
    energy = float(np.sum(w[:, None] * Z) / (2 * H))
    drift_term = np.einsum("id,hde,ihe->ih", X, f, Y, optimize=True)
    dEdt = np.sum(w[:, None] * drift_term)
    if sigma > 0:
        if fields.Q is None:
            raise ValueError("state_rates: sigma > 0 needs the second moment Q (want_q=True)")
        dEdt += (sigma**2 / 4) * np.sum(w[:, None] * (Z + fields.Q))
    dEdt /= 2 * H
    grad_xi = project(X, np.einsum("hde,ihe->id", D, Y, optimize=True) / H)
    transport = float(np.sum(w * np.sum(grad_xi * v, axis=1)))
    if is_normalised(attention):
        mobility = np.mean(1.0 / Z, axis=1)  # (1/H) sum_h 1/Z_h
        G2 = float(np.sum(w * np.sum(v * v, axis=1) / mobility))
    else:  # unnormalised attention: mobility 1
        G2 = float(np.sum(w * np.sum(v * v, axis=1)))
    return {
        "energy": energy,
        "dEdt_partial": float(dEdt),
        "transport": transport,
        "G2": G2,
        "xi": Z.mean(axis=1),
        "grad_xi": grad_xi,
        "M": np.einsum("i,id,ihe->hde", w, X, Y, optimize=True),
    }


def martingale_increment(X, w, fields: HeadFields, dM) -> float:
    """(1/(2H)) sum_h sum_i w_i x_i^T dM_h Y_h(x_i): the Ito martingale increment."""
    H = dM.shape[0]
    return float(np.sum(w[:, None] * np.einsum("id,hde,ihe->ih", X, dM, fields.Y, optimize=True)) / (2 * H))


def weights_work(dD, M) -> float:
    """(1/(2H)) sum_h <dD_h, M_h>: the first-order change of E when the matrices change by dD (H, d, d)
    at the measure whose moments are M (H, d, d) (M_h = 2H dE/dD_h, :func:`state_rates`, ``fused_rates``)."""
    return float(np.sum(dD * M) / (2 * dD.shape[0]))


def weights_change(path, t0: float, t1: float):
    """D(t1) - D(t0) (H, d, d) of a gradient-head weight path (linear between its grid points), or
    None when the path is constant (:attr:`~spherepde.model.weights.WeightPath.is_constant`)."""
    if path.is_constant:
        return None
    return path.matrices(t1)[0] - path.matrices(t0)[0]


def mean_resultant_length(X, w) -> float:
    """|sum_i w_i x_i| (1 for a single point mass, 0 for a balanced configuration)."""
    return float(np.linalg.norm(w @ X))


@dataclass
class EnergyBalance:
    """Running integrals of the energy balance (docs/model.md §3).

    Integrals of d_tE, transport and G2 are accumulated with the time integrator's own
    quadrature weights (stage rates times b_i dt); the martingale with the Ito (left
    point) rule on the weight grid; the energy's change through the weights (``int_dE_weights``)
    by the trapezoid rule on :func:`weights_work` of the step's change of D (:meth:`add_weights_change`).
    """

    sign: float
    E0: float | None = None
    int_dEdt: float = 0.0
    int_transport: float = 0.0
    int_G2: float = 0.0
    martingale: float = 0.0
    #: energy changes that are not time stepping (the mesh solver's collapses, absorptions and merges
    #: of point masses): the column ``int_collapse_energy``, subtracted from every residual but ``edi_weights``
    jumps: float = 0.0
    #: the integral of the G^2 in the paper-form balance: the rates' ``G2_scheme`` where they have
    #: one (the mesh: the scheme's own metric slope, docs/model.md §3.4), else ``G2``
    int_G2_scheme: float = 0.0
    #: the energy's change through the weights, the trapezoid rule on weights_work per step (NaN:
    #: resumed from a state written before it was kept, :meth:`unknown_columns`)
    int_dE_weights: float = 0.0
    _fields: tuple = field(default=("E0", "int_dEdt", "int_transport", "int_G2", "martingale", "jumps", "int_G2_scheme",
                                    "int_dE_weights"), repr=False)
    #: token noise nu (0: none; the fields below are kept only when nu > 0) and whether the free-energy form holds
    #: (unnormalised attention with gradient heads; module docstring)
    noise: float = 0.0
    free: bool = False
    F0: float | None = None
    int_diffusion: float = 0.0
    int_DF: float = 0.0

    def start(self, rates: dict) -> None:
        """Take the initial state's rates: E0 (and with noise the free energy F0)."""
        self.E0 = rates["energy"]
        if self.noise > 0:
            self.F0 = self._free_energy(rates)

    def _free_energy(self, rates: dict) -> float:
        return -self.sign * rates["energy"] + self.noise * rates["entropy"]

    def add_stages(self, dt: float, b, stage_rates) -> None:
        """Add one Runge--Kutta step of size dt: the stage rates times b_i dt."""
        for bi, r in zip(b, stage_rates):
            if bi == 0.0:
                continue
            self.int_dEdt += bi * dt * r["dEdt_partial"]
            self.int_transport += bi * dt * r["transport"]
            self.int_G2 += bi * dt * r["G2"]
            self.int_G2_scheme += bi * dt * r.get("G2_scheme", r["G2"])
            if self.noise > 0:
                self.int_diffusion += bi * dt * r["diffusion"]
                self.int_DF += bi * dt * r["DF"]

    def add_noise(self, diffusion: float, DF: float) -> None:
        """Add one step's integrals of the diffusion's work and of D_F (integrators that are not Runge--Kutta stages)."""
        self.int_diffusion += diffusion
        self.int_DF += DF

    def add_integrals(self, dEdt: float, transport: float, G2: float, G2_scheme: float) -> None:
        """Add one step's integrals directly (integrators that are not Runge--Kutta stages)."""
        self.int_dEdt += dEdt
        self.int_transport += transport
        self.int_G2 += G2
        self.int_G2_scheme += G2_scheme

    def add_weights_change(self, dD, M_start, M_end) -> None:
        """Add one step's energy change through the weights by the trapezoid rule along the chord of the
        weight path: (1/2) [weights_work(dD, M_start) + weights_work(dD, M_end)], ``dD`` = D(t_end) - D(t_start)
        (None: the matrices do not change), M_start / M_end the moments of the step's first and last state
        (the trapezoid rule whatever the time scheme: in D it is exact to third order, so the curvature of E in D --
        Ito's correction, pathwise -- stays on the weights' side)."""
        if dD is not None:
            self.int_dE_weights += 0.5 * (weights_work(dD, M_start) + weights_work(dD, M_end))

    def add_martingale(self, dM: float) -> None:
        self.martingale += dM

    def residuals(self, energy: float) -> tuple[float, float]:
        """(edi_paper, edi_exact) at the energy ``energy`` (module docstring)."""
        dE = energy - self.E0 - self.jumps
        edi_paper = dE - self.int_dEdt - self.sign * self.int_G2_scheme - self.martingale
        edi_exact = dE - self.int_dEdt - self.int_transport - self.martingale
        return edi_paper, edi_exact

    def split(self, energy: float) -> tuple[float, float]:
        """(edi_transport, edi_weights) at the energy ``energy``: the solver's part and the weight path's
        part of edi_exact (module docstring; their sum is edi_exact up to round-off)."""
        edi_transport = energy - self.E0 - self.jumps - self.int_dE_weights - self.int_transport
        edi_weights = self.int_dE_weights - self.int_dEdt - self.martingale
        return edi_transport, edi_weights

    def columns(self, rates: dict | None) -> dict:
        """The energy columns of a diagnostics row from the current instantaneous ``rates``
        (:func:`state_rates`); all NaN when ``rates`` is None (general heads: undefined)."""
        if rates is None:
            return {k: float("nan") for k in ENERGY_COLUMNS}
        edi_paper, edi_exact = self.residuals(rates["energy"])
        edi_transport, edi_weights = self.split(rates["energy"])
        return {
            "energy": rates["energy"],
            "dEdt_partial": rates["dEdt_partial"],
            "martingale": self.martingale,
            "transport": rates["transport"],
            "G2": rates["G2"],
            "int_dEdt": self.int_dEdt,
            "int_transport": self.int_transport,
            "int_G2": self.int_G2,
            "edi_paper": edi_paper,
            "edi_exact": edi_exact,
            "int_dE_weights": self.int_dE_weights,
            "int_collapse_energy": self.jumps,
            "edi_transport": edi_transport,
            "edi_weights": edi_weights,
        }

    def noise_columns(self, rates: dict | None, entropy: float) -> dict:
        """The columns of token noise (:data:`~spherepde.model.columns.NOISE_COLUMNS`) from the current ``rates`` (None:
        general heads) and ``entropy``; the free-energy columns are NaN unless :attr:`free` (module docstring)."""
        nan = float("nan")
        row = {"entropy": entropy, "diffusion": nan, "int_diffusion": nan, "free_energy": nan, "DF": nan, "int_DF": nan, "edi_free": nan}
        if rates is None:
            return row
        row.update(diffusion=rates["diffusion"], int_diffusion=self.int_diffusion)
        if self.free:
            F = self._free_energy(rates)
            row.update(free_energy=F, DF=rates["DF"], int_DF=self.int_DF,
                       edi_free=F - self.F0 + self.sign * (self.int_dEdt + self.martingale) + self.int_DF)
        return row

    def unknown_columns(self) -> frozenset:
        """The columns this balance cannot know: the split of edi_exact after a resume from a state
        written before ``int_dE_weights`` was kept (NaN there by design), and with noise the free-energy
        columns of softmax heads (no free-energy structure); else none."""
        out = frozenset()
        if math.isnan(self.int_dE_weights):
            out |= frozenset(("int_dE_weights", "edi_transport", "edi_weights"))
        if self.noise > 0 and not self.free:
            out |= frozenset(("free_energy", "DF", "int_DF", "edi_free"))
        return out

    def state(self) -> dict:
        keys = self._fields + (("F0", "int_diffusion", "int_DF") if self.noise > 0 else ())
        return {k: getattr(self, k) for k in keys}

    def restore(self, d: dict) -> None:
        """Restore :meth:`state`; states written before a field existed: ``jumps`` 0, ``int_G2_scheme``
        the one G^2 they integrated, ``int_dE_weights`` NaN (unknown, so the split reads NaN, never a wrong number)."""
        for k in self._fields:
            if k not in d and k in ("jumps", "int_G2_scheme", "int_dE_weights"):
                continue
            setattr(self, k, float(d[k]) if d[k] is not None else None)
        for k in ("F0", "int_diffusion", "int_DF"):
            if self.noise > 0 and k in d:
                setattr(self, k, float(d[k]))
        if "int_G2_scheme" not in d:  # such states integrated one G^2 (the nodal one on the mesh)
            self.int_G2_scheme = self.int_G2
        if "jumps" not in d:
            self.jumps = 0.0
        if "int_dE_weights" not in d:
            self.int_dE_weights = float("nan")
