"""The exceptions of the mesh solver, its steppers and components (:mod:`spherepde.solvers.mesh`,
:mod:`spherepde.solvers.integrators`, :mod:`spherepde.solvers.atoms`), the check of their positive options and of an initial density."""

from __future__ import annotations

import logging
import math

import numpy as np

__all__ = ["CFLViolation", "OptionError", "PositivityError", "SolverError", "initial_density", "positive"]

log = logging.getLogger("spherepde.solvers.mesh")  # the messages are the mesh solver's


class SolverError(RuntimeError):
    """The mesh solver cannot continue (non-finite values, invalid step)."""


class CFLViolation(SolverError):
    """A fixed time step exceeds the CFL bound of the current velocity."""


class PositivityError(SolverError):
    """The density became negative beyond round-off."""


class OptionError(ValueError):
    """An option value the solver cannot use, or one that conflicts with another; ``option`` is its
    name (``"order"``, ``"atoms"``, ...), which the config reports as ``solver.<option>``."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def positive(name: str, value, *, none: str = "") -> float | None:
    """``value`` as a float, which must be positive and finite (ValueError naming ``name``);
    None passes through when ``none`` (the message's note on what None means) is given."""
    if value is None and none:
        return None
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive number{none}, got {v}")
    return v


def initial_density(rho0, areas: np.ndarray, atom_mass: float = 0.0) -> np.ndarray:
    """A copy of the initial cell density, checked: one finite, non-negative value per cell (ValueError
    naming the problem otherwise). Its mass sum(rho |C|) with the point masses' ``atom_mass`` is
    brought to 1 with a warning when it is not (the cells are rescaled; the point masses are state)."""
    rho = np.array(rho0, dtype=np.float64, copy=True)
    nc = areas.shape[0]
    if rho.shape != (nc,):
        raise ValueError(f"initial density has shape {rho.shape}, but the mesh has {nc} cells; expected ({nc},)")
    if not np.all(np.isfinite(rho)):
        raise ValueError(f"initial density contains {int(np.sum(~np.isfinite(rho)))} NaN/inf value(s)")
    if np.any(rho < 0):
        i = int(np.argmin(rho))
        raise ValueError(f"initial density must be non-negative; rho[{i}] = {rho[i]:.3e} ({int(np.sum(rho < 0))} negative cells)")
    mass = float(np.sum(rho * areas))
    if not mass > 0 and atom_mass == 0:
        raise ValueError("initial density has zero mass")
    if abs(mass + atom_mass - 1.0) > 1e-10:
        if atom_mass:
            log.warning("initial cells have mass %.6g and the point masses %.6g; rescaling the cells to %.6g", mass, atom_mass, 1 - atom_mass)
            rho *= (1.0 - atom_mass) / mass if mass > 0 else 0.0
        else:
            log.warning("initial density has mass %.6g; normalising to 1", mass)
            rho /= mass
    return rho
