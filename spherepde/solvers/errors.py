"""The exceptions of the mesh solver and its steppers (:mod:`spherepde.solvers.mesh`,
:mod:`spherepde.solvers.integrators`), and the check of their positive options."""

from __future__ import annotations

import math

__all__ = ["CFLViolation", "PositivityError", "SolverError", "positive"]


class SolverError(RuntimeError):
    """The mesh solver cannot continue (non-finite values, invalid step)."""


class CFLViolation(SolverError):
    """A fixed time step exceeds the CFL bound of the current velocity."""


class PositivityError(SolverError):
    """The density became negative beyond round-off."""


def positive(name: str, value, *, none: str = "") -> float | None:
    """``value`` as a float, which must be positive and finite (ValueError naming ``name``);
    None passes through when ``none`` (the message's note on what None means) is given."""
    if value is None and none:
        return None
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive number{none}, got {v}")
    return v
