"""Strong-stability-preserving Runge--Kutta schemes as data (docs/model.md §4).

The mesh solver advances the semi-discrete system du/dt = L(u, t) with explicit SSP
Runge--Kutta methods written in Shu--Osher form (Shu & Osher 1988; Gottlieb, Shu &
Tadmor, SIAM Review 43, 2001):

    u^(0) = u_n,
    u^(i) = sum_{j<i} ( alpha_ij u^(j) + dt beta_ij L(u^(j), t_n + c_j dt) ),  i = 1..s,
    u_{n+1} = u^(s).

Every stage is a convex combination of forward-Euler steps of size (beta_ij/alpha_ij) dt
<= dt, so positivity and the maximum principle of one Euler step under the CFL bound
carry over (SSP coefficient 1 for all three schemes below).

Each scheme also stores its equivalent Butcher weights ``b`` (u_{n+1} = u_n +
dt sum_j b_j L(u^(j), t_n + c_j dt)) and stage times ``c``. The solver uses ``b`` as the
quadrature weights of the running time integrals of the energy balance: applying the
same Runge--Kutta method to the augmented system (u, E) with E' = dE/dt(u) gives
exactly E_{n+1} = E_n + dt sum_j b_j E'(u^(j)), so the balance residual is O(dt^p).

Schemes (``INTEGRATORS``):

* ``euler``  -- forward Euler, order 1, b = (1,), c = (0,);
* ``ssprk2`` -- Heun / SSP-RK(2,2), order 2, b = (1/2, 1/2), c = (0, 1);
* ``ssprk3`` -- Shu--Osher SSP-RK(3,3), order 3, b = (1/6, 1/6, 2/3), c = (0, 1, 1/2):
  u1 = u + dt L(u, t); u2 = 3/4 u + 1/4 (u1 + dt L(u1, t + dt));
  u_new = 1/3 u + 2/3 (u2 + dt L(u2, t + dt/2)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["IMPLICIT", "INTEGRATORS", "MESH_INTEGRATORS", "METHODS", "Method", "SSPScheme", "get_integrator", "integrator_names", "resolve_integrator"]

#: The linearly implicit upwind Euler step with local-error step control
#: (:mod:`spherepde.solvers.implicit`; mesh solver, order 1 only). Not an SSP scheme.
IMPLICIT = "implicit"


@dataclass(frozen=True)
class SSPScheme:
    """An explicit SSP Runge--Kutta scheme in Shu--Osher form.

    Attributes
    ----------
    name : registry name.
    order : classical order of accuracy p.
    alpha : tuple of rows; ``alpha[i-1][j]`` (j < i) multiplies the stage value u^(j) in u^(i).
    beta : tuple of rows; ``beta[i-1][j]`` multiplies dt L(u^(j), t + c_j dt) in u^(i).
    c : stage times (fractions of dt) at which L is evaluated, one per stage value
        u^(0)..u^(s-1).
    b : equivalent Butcher weights of L(u^(j)), used as quadrature weights (sum to 1).
    """

    name: str
    order: int
    alpha: tuple
    beta: tuple
    c: tuple
    b: tuple

    @property
    def stages(self) -> int:
        """Number of evaluations of L per step."""
        return len(self.c)

    def butcher(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Butcher tableau (A, b, c) derived from the Shu--Osher coefficients.

        Stage value u^(i) = u_n + dt sum_j A_ij L(u^(j)); computed recursively from
        u^(i) = sum_j alpha_ij u^(j) + dt beta_ij L(u^(j)). Returns A (s, s), b (s,)
        (the row of the final combination) and c = A.sum(axis=1).
        """
        s = self.stages
        rows = np.zeros((s + 1, s))  # row i: coefficients of dt L(u^(j)) in u^(i) - u_n
        for i in range(1, s + 1):
            for j, (a, bt) in enumerate(zip(self.alpha[i - 1], self.beta[i - 1])):
                rows[i] += a * rows[j]
                rows[i, j] += bt
        return rows[:s], rows[s], rows[:s].sum(axis=1)


INTEGRATORS: dict[str, SSPScheme] = {
    "euler": SSPScheme("euler", 1, alpha=((1.0,),), beta=((1.0,),), c=(0.0,), b=(1.0,)),
    "ssprk2": SSPScheme(
        "ssprk2",
        2,
        alpha=((1.0,), (0.5, 0.5)),
        beta=((1.0,), (0.0, 0.5)),
        c=(0.0, 1.0),
        b=(0.5, 0.5),
    ),
    "ssprk3": SSPScheme(
        "ssprk3",
        3,
        alpha=((1.0,), (0.75, 0.25), (1.0 / 3.0, 0.0, 2.0 / 3.0)),
        beta=((1.0,), (0.0, 0.25), (0.0, 0.0, 2.0 / 3.0)),
        c=(0.0, 1.0, 0.5),
        b=(1.0 / 6.0, 1.0 / 6.0, 2.0 / 3.0),
    ),
}


#: Every name the mesh solver accepts as ``integrator``.
MESH_INTEGRATORS: tuple[str, ...] = (*INTEGRATORS, IMPLICIT)


def get_integrator(name: str | SSPScheme) -> SSPScheme:
    """The registered scheme called ``name`` (an :class:`SSPScheme` is returned unchanged).

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the valid names.
    """
    if isinstance(name, SSPScheme):
        return name
    try:
        return INTEGRATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown time integrator {name!r}; valid names: {', '.join(sorted(INTEGRATORS))}") from None


# ------------------------------------------------------------------ the one registry of methods
@dataclass(frozen=True)
class Method:
    """A time-integration method as users name it (``solver.integrator``), for every solver.

    Attributes
    ----------
    name : str
        The method's name.
    order : int
        Its order of accuracy in time.
    solvers : tuple of str
        The solvers that implement it (``"particles"``, ``"mesh"``).
    aliases : tuple of str
        Other accepted names.
    about : str
        One line for messages and the documentation.
    """

    name: str
    order: int
    solvers: tuple
    aliases: tuple = ()
    about: str = ""


#: Every time-integration method of the package: the particle solver's (``euler``, ``heun``) and
#: the mesh solver's (:data:`INTEGRATORS` and :data:`IMPLICIT`). Heun's method is SSP-RK2 (the
#: same Butcher tableau), so ``heun`` and ``ssprk2`` name one method for both solvers.
METHODS: dict[str, Method] = {
    "euler": Method("euler", 1, ("particles", "mesh"), (), "forward Euler (tokens: then renormalised, the paper's scheme)"),
    "heun": Method("heun", 2, ("particles", "mesh"), ("ssprk2",), "Heun's method = SSP-RK2 (explicit trapezoid)"),
    "ssprk3": Method("ssprk3", 3, ("mesh",), (), "Shu--Osher SSP-RK3"),
    IMPLICIT: Method(IMPLICIT, 1, ("mesh",), (), "linearly implicit upwind, steps from a local error estimate (mesh, order 1)"),
}

#: The key each solver's implementation uses for a method (the mesh's SSP table says ssprk2 for Heun).
_IMPLEMENTATION = {("particles", "heun"): "heun", ("mesh", "heun"): "ssprk2"}


def _method(name: str) -> Method | None:
    for m in METHODS.values():
        if name == m.name or name in m.aliases:
            return m
    return None


def integrator_names(solver: str | None = None) -> tuple[str, ...]:
    """Every accepted name (with aliases), or those of one solver (``"particles"`` / ``"mesh"``)."""
    return tuple(n for m in METHODS.values() if solver is None or solver in m.solvers for n in (m.name, *m.aliases))


def resolve_integrator(name: str, solver: str) -> str:
    """The name ``solver``'s implementation uses for the method called ``name`` (an alias allowed).

    Raises
    ------
    ValueError
        If no method has that name, or ``solver`` does not implement it; the message lists
        the names that solver accepts.
    """
    m = _method(name) if isinstance(name, str) else None
    valid = ", ".join(repr(n) for n in integrator_names(solver))
    if m is None:
        raise ValueError(f"unknown time integrator {name!r}; the {solver} solver accepts {valid}")
    if solver not in m.solvers:
        raise ValueError(f"{name!r} ({m.about}) is not implemented for the {solver} solver; it accepts {valid}")
    return _IMPLEMENTATION.get((solver, m.name), m.name)
