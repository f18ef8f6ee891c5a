"""The columns of ``diagnostics.csv``: one registry, read by every writer and reader.

Each column has a name, a long name and CF-style units (``"1"``: dimensionless model
units; :class:`Column`), and the solvers that write it. The solvers write their columns
in the order of :func:`solver_columns` (the column order of ``diagnostics.csv``):

* ``particles``: :data:`PARTICLE_COLUMNS` (with token noise, ``model.noise > 0``, then
  :data:`TOKEN_NOISE_COLUMNS`: :func:`particle_columns`);
* ``mesh``: :data:`MESH_COLUMNS` (with token noise, then :data:`NOISE_COLUMNS`);
* ``both``: every mesh column, then :data:`TOKEN_COLUMNS` of the tokens with the prefix
  :data:`PARTICLE_PREFIX` (with token noise also :data:`TOKEN_NOISE_COLUMNS`), then the distances
  chosen by ``output.distances`` (:data:`DISTANCE_MODES`).

``energy`` marks the columns that are NaN by definition for general heads (no energy);
``compare`` whether ``spherepde compare`` compares the column between runs (counters and
step sizes are not compared; the distances are compared against their floor instead).
:data:`LEGACY_COLUMNS` were written by coupled runs of earlier releases: readers
recognise them, no solver writes them. :data:`HEADLINE_COLUMNS` are the few shown first
(a run's final values, ``spherepde compare``'s table, a sweep's results); a column's
``symbol`` and ``axis`` label are what figures show for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Column",
    "COLUMNS",
    "SOLVERS",
    "MESH_SOLVERS",
    "TOKEN_SOLVERS",
    "ENERGY_COLUMNS",
    "RESIDUAL_COLUMNS",
    "HEADLINE_COLUMNS",
    "MESH_HEADLINE_COLUMNS",
    "PARTICLE_COLUMNS",
    "TOKEN_NOISE_COLUMNS",
    "particle_columns",
    "MESH_COLUMNS",
    "NOISE_COLUMNS",
    "PARTICLE_PREFIX",
    "TOKEN_COLUMNS",
    "DISTANCE_MODES",
    "DISTANCE_COLUMNS",
    "LEGACY_COLUMNS",
    "solver_columns",
    "writers",
    "undefined_without_energy",
    "compared",
    "is_token_column",
    "distance_columns",
    "attributes",
]

_DIMLESS = "1"


@dataclass(frozen=True)
class Column:
    """One column of ``diagnostics.csv``: ``long_name`` and ``units`` (CF style) are the
    attributes of its variable in :func:`spherepde.runs.dataset.open_run`."""

    name: str
    long_name: str
    units: str = _DIMLESS
    energy: bool = False  # NaN by definition for general heads
    compare: bool = True  # compared between runs by ``spherepde compare``
    symbol: str = ""  # the figures' legend entry (Matplotlib mathtext); empty: the name
    axis: str = ""  # the figures' axis label; empty: the long name


# One entry per quantity (the p_ token columns are derived below).
_QUANTITIES = (
    Column("t", "time of the record", compare=False),
    Column("step", "number of time steps taken", compare=False),
    Column("energy", "interaction energy E = (1/2H) sum_h int int exp(x^T D_h y) dmu dmu", energy=True, symbol=r"$E(t)$", axis=r"energy $E$"),
    Column("dEdt_partial", "partial time derivative of E through the weights, with the Ito correction", energy=True),
    Column("martingale", "martingale term M_t of the energy balance (Ito, left point)", energy=True),
    Column("transport", "transport term int grad(dE/dmu) . v dmu", energy=True),
    Column("G2", "metric slope G^2 (softmax: harmonic-mean mobility; unnormalised attention: int |v|^2 dmu, mobility 1; mesh: at the "
                 "cell nodes, the estimate of the continuum value)", energy=True,
           symbol=r"$G^2(t)$", axis=r"$G^2$ (metric slope)"),
    Column("int_dEdt", "time integral of dEdt_partial", energy=True),
    Column("int_transport", "time integral of the transport term", energy=True),
    Column("int_G2", "time integral of G^2", energy=True),
    Column("edi_paper", "energy-dissipation identity residual, the paper's form", energy=True,
           symbol="EDI residual, paper's form", axis="residual (paper's form)"),
    Column("edi_exact", "energy-dissipation identity residual, exact chain-rule form", energy=True,
           symbol="EDI residual, exact chain rule", axis="residual (exact chain rule)"),
    Column("int_dE_weights", "energy change through the weights: sum over steps of (1/2H) sum_h <D_h(end) - D_h(start), M_h>, "
                             "M_h = 2H dE/dD_h at the stages", energy=True),
    Column("int_collapse_energy", "energy of the collapses, absorptions and merges of point masses so far (mesh, solver.atoms; else 0)",
           energy=True, symbol=r"$J_t$ (collapses and merges)"),
    Column("edi_transport", "the solver's part of edi_exact: E(t) - E(0) - int_collapse_energy - int_dE_weights - int_transport", energy=True,
           symbol="EDI residual, the solver's transport part", axis="residual (solver's transport part)"),
    Column("edi_weights", "the weight path's part of edi_exact: int_dE_weights - int_dEdt - martingale", energy=True,
           symbol="EDI residual, the weight path's part", axis="residual (weight path's part)"),
    Column("mean_resultant", "mean resultant length |int x dmu|", symbol=r"$R(t) = |\int x\,d\mu_t|$", axis=r"mean resultant length $R$"),
    Column("mass", "total mass sum_c rho_c |C_c| plus point masses"),
    Column("rho_min", "minimum cell density", "sr-1"),
    Column("rho_max", "maximum cell density", "sr-1"),
    Column("dt_last", "last time step", compare=False),
    Column("speed_rms", "root-mean-square token speed"),
    Column("n_clusters", "number of clusters: single-linkage groups at chordal distance 0.1 holding at least 1 % of the mass "
                         "(tokens; mesh: point masses and cells denser than 5/(4 pi), 5/(2 pi) on the circle); tokens spread between "
                         "forming clusters link them into one group, so before collapse the tokens' count is lower than the mesh's",
           symbol="clusters (groups with >= 1 % of the mass)", axis="number of clusters"),
    Column("G2_scheme", "mesh: the scheme's own metric slope (edge fluxes; mobility 1 with unnormalised attention), the G^2 of the "
                        "paper-form balance edi_paper", energy=True),
    Column("int_G2_scheme", "mesh: time integral of G2_scheme", energy=True),
    Column("atom_mass", "mesh: mass carried by point masses (collapsed clusters, solver.atoms)"),
    Column("entropy", "token noise (model.noise > 0): the entropy S = int rho log rho; mesh: sum_c |C_c| rho_c log rho_c; tokens: "
                      "estimated by the leave-one-out von Mises-Fisher kernel density estimate at the tokens, sum_i w_i log f_i(x_i), its "
                      "concentration chosen by likelihood cross-validation on the grid 2^(j/2) <= 2^16 (uniform: -log 4 pi on S^2, "
                      "-log 2 pi on S^1; docs/model.md §10)", symbol=r"$S = \int\rho\log\rho$", axis=r"$\int\rho\log\rho$"),
    Column("diffusion", "mesh, token noise: the diffusion's part of the transport term, sum_c xi_c |C_c| (d rho_c/dt)_diffusion "
                        "(the work of the diffusive flux against xi = dE/dmu; transport minus it is the drift's part)", energy=True),
    Column("int_diffusion", "mesh, token noise: time integral of the diffusion column", energy=True),
    Column("free_energy", "mesh, token noise, unnormalised attention with gradient heads: free energy F = -s E + nu S (NaN for "
                          "softmax heads: transport and diffusion do not form one gradient flow)", energy=True, symbol=r"$F = -sE + \nu S$"),
    Column("DF", "mesh, token noise, unnormalised attention: the scheme's dissipation of F, sum_e |e| F_e (mu_c - mu_n), "
                 "mu = nu log rho - s xi (the discrete int rho |grad(nu log rho - s xi)|^2; NaN for softmax heads)", energy=True),
    Column("int_DF", "mesh, token noise, unnormalised attention: time integral of DF (NaN for softmax heads)", energy=True),
    Column("edi_free", "mesh, token noise, unnormalised attention: free-energy balance residual F(t) - F(0) + s int_dEdt + "
                       "int_DF + s martingale (NaN for softmax heads)", energy=True,
           symbol="free-energy balance residual", axis="residual (free energy)"),
    Column("l1_hist", "L1 distance between the density and the smoothed token histogram", compare=False,
           symbol=r"$L^1$ to the token histogram (vMF kernel; $\in[0, 2]$)"),
    Column("w1_sliced", "sliced spherical 1-Wasserstein distance between density and tokens", "rad", compare=False,
           symbol=r"sliced spherical $W_1$ (random great circles; rad)"),
    Column("w1_exact", "1-Wasserstein distance between density and tokens (geodesic cost)", "rad", compare=False,
           symbol=r"exact $W_1$ (geodesic cost, network simplex; rad)"),
)

#: The solvers of a single run, the values of ``run.solver`` (a run's kind, with the Monte-Carlo
#: folder of :data:`spherepde.runs.runfolder.RUN_KINDS`): the one list of them.
SOLVERS = ("particles", "mesh", "both")

#: The solvers whose runs hold a density on a mesh, and those whose runs hold tokens.
MESH_SOLVERS = ("mesh", "both")
TOKEN_SOLVERS = ("particles", "both")

#: The energy-based columns of every solver, in their order (NaN for general heads).
ENERGY_COLUMNS = ("energy", "dEdt_partial", "martingale", "transport", "G2", "int_dEdt", "int_transport", "int_G2", "edi_paper", "edi_exact",
                  "int_dE_weights", "int_collapse_energy", "edi_transport", "edi_weights")

#: The energy-balance residuals (edi_exact = edi_transport + edi_weights; docs/guide/results-as-data.md):
#: ``spherepde compare`` measures their differences against the energy scale, not against each other.
RESIDUAL_COLUMNS = ("edi_paper", "edi_exact", "edi_transport", "edi_weights")

#: The headline columns, in their order: shown first by a run's final values, ``spherepde
#: compare``'s table and a sweep's results (every solver writes them).
HEADLINE_COLUMNS = ("energy", "G2", "edi_paper", "edi_exact", "mean_resultant")

#: The mesh's headline columns after :data:`HEADLINE_COLUMNS` (a run's final values).
MESH_HEADLINE_COLUMNS = ("mass", "rho_min")

_COMMON = ("t", "step") + ENERGY_COLUMNS + ("mean_resultant",)

#: Columns of a particle run, in order.
PARTICLE_COLUMNS = _COMMON + ("speed_rms", "n_clusters")

#: Columns token runs add after their others when the tokens carry noise (``model.noise > 0``).
TOKEN_NOISE_COLUMNS = ("entropy",)


def particle_columns(noise: bool = False) -> tuple[str, ...]:
    """The columns of a particle run, in order: :data:`PARTICLE_COLUMNS`, then :data:`TOKEN_NOISE_COLUMNS` when the tokens carry noise."""
    return PARTICLE_COLUMNS + (TOKEN_NOISE_COLUMNS if noise else ())


#: Columns of a mesh run, in order (a ``both`` run starts with them).
MESH_COLUMNS = _COMMON + ("G2_scheme", "int_G2_scheme", "n_clusters", "atom_mass", "mass", "rho_min", "rho_max", "dt_last")

#: The columns a mesh run adds after :data:`MESH_COLUMNS` when it has token noise (``model.noise`` > 0).
NOISE_COLUMNS = ("entropy", "diffusion", "int_diffusion", "free_energy", "DF", "int_DF", "edi_free")

#: Prefix of the token columns of a ``both`` run.
PARTICLE_PREFIX = "p_"

#: The particle columns a ``both`` run records for its tokens (with :data:`PARTICLE_PREFIX`), in order.
TOKEN_COLUMNS = HEADLINE_COLUMNS + ("n_clusters",)

#: ``output.distances`` setting -> the distance columns a ``both`` run records, in order.
DISTANCE_MODES = {"none": (), "cheap": ("l1_hist", "w1_sliced"), "all": ("l1_hist", "w1_sliced", "w1_exact")}

#: Every distance column a ``both`` run may write.
DISTANCE_COLUMNS = DISTANCE_MODES["all"]

#: Columns of coupled runs of earlier releases: ``w_sphere`` (exact or sliced W) and
#: ``w_exact`` (a 0/1 flag naming the method of ``w_sphere``, not a distance).
LEGACY_COLUMNS = ("w_sphere", "w_exact")


def _token(c: Column) -> Column:
    return Column(PARTICLE_PREFIX + c.name, "tokens: " + c.long_name, c.units, c.energy, c.compare, c.symbol, c.axis)


_BY_NAME = {c.name: c for c in _QUANTITIES}

#: Every registered column by name: the quantities, then the token columns of ``both`` runs.
COLUMNS: dict[str, Column] = {**_BY_NAME, **{PARTICLE_PREFIX + k: _token(_BY_NAME[k]) for k in TOKEN_COLUMNS + TOKEN_NOISE_COLUMNS}}


def solver_columns(solver: str, distances: str = "cheap", *, noise: bool = False) -> tuple[str, ...]:
    """The header of ``diagnostics.csv`` of a ``run.solver = solver`` run (``both``: with
    ``output.distances = distances``; ``noise``: model.noise > 0: the mesh adds :data:`NOISE_COLUMNS`, the tokens :data:`TOKEN_NOISE_COLUMNS`)."""
    mesh = MESH_COLUMNS + (NOISE_COLUMNS if noise else ())
    if solver == "particles":
        return particle_columns(noise)
    if solver == "mesh":
        return mesh
    if solver == "both":
        if distances not in DISTANCE_MODES:
            raise ValueError(f"output.distances: unknown setting {distances!r}; use {', '.join(repr(k) for k in DISTANCE_MODES)}")
        tokens = TOKEN_COLUMNS + (TOKEN_NOISE_COLUMNS if noise else ())
        return mesh + tuple(PARTICLE_PREFIX + k for k in tokens) + DISTANCE_MODES[distances]
    raise ValueError(f"run.solver: unknown solver {solver!r}; use {', '.join(repr(s) for s in SOLVERS)}")


def writers(name: str) -> tuple[str, ...]:
    """The solvers that may write column ``name`` (empty for an unregistered name; with or without token noise)."""
    return tuple(s for s in SOLVERS if any(name in solver_columns(s, "all", noise=noise) for noise in (False, True)))


def undefined_without_energy() -> frozenset:
    """Columns NaN by definition for general heads (every solver, tokens of ``both`` runs included)."""
    return frozenset(k for k, c in COLUMNS.items() if c.energy)


def is_token_column(name: str) -> bool:
    """Whether ``name`` is a column of the tokens of a ``both`` run (``p_...``)."""
    return name.startswith(PARTICLE_PREFIX)


def compared(name: str) -> bool:
    """Whether ``spherepde compare`` compares column ``name`` between runs (a token
    column: by its name without the prefix). Legacy columns are not compared; a column
    this release does not know is."""
    if name in LEGACY_COLUMNS:
        return False
    c = COLUMNS.get(name)
    return True if c is None else c.compare


def distance_columns(columns) -> list[str]:
    """The columns of ``columns`` holding mesh-versus-particle distances, in their order:
    the registered ones (:data:`DISTANCE_COLUMNS`), legacy ``w_sphere`` and any other
    ``w1_*``, ``w_*``, ``l1_*`` column; never the method flag ``w_exact`` of older runs."""
    return [c for c in columns if c.startswith(("w1_", "w_", "l1_")) and c != "w_exact"]


def attributes(name: str) -> tuple[str, str]:
    """(long name, units) of column ``name``: a token column of an older run that this
    release does not record is described by its quantity; an unknown column by its name."""
    c = COLUMNS.get(name)
    if c is None and is_token_column(name) and name[len(PARTICLE_PREFIX):] in _BY_NAME:
        c = _token(_BY_NAME[name[len(PARTICLE_PREFIX):]])
    return (c.long_name, c.units) if c is not None else (name, _DIMLESS)
