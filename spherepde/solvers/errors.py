"""The exceptions of the mesh solver, its steppers and components (:mod:`spherepde.solvers.mesh`,
:mod:`spherepde.solvers.integrators`, :mod:`spherepde.solvers.atoms`), and the check of their positive options."""

from __future__ import annotations

import math

__all__ = ["CFLViolation", "OptionError", "PositivityError", "SolverError", "positive"]


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
