"""spherepde's validation studies: one importable module per study.

Each study module defines

* ``NAME`` and ``TITLE``;
* ``SIZES`` -- ``{"smoke": {...}, "quick": {...}, "full": {...}}`` parameter sets
  (smoke: seconds, used by the test suite; quick: part of ``spherepde validate --quick``,
  a few minutes in all; full: the complete study);
* ``run(size="quick", **overrides) -> dict`` -- computes; returns JSON-serialisable
  numbers, including

  - ``"summary"``: a Markdown paragraph that states plainly what was and was not
    reproduced; its verdicts are generated from the same booleans as the two below;
  - ``"checks"``: the **solver checks**, ``{name: {"passed", "measured", "expected", "lo",
    "hi", "tolerance"}}`` (:func:`spherepde.studies.common.solver_check`): each compares
    a measured number with an analytic value, a reference or an expected order, with a
    tolerance that a wrong scheme misses; they must pass (may be empty);
  - ``"claims"`` (optional): the **paper claims**, ``{name: {"reproduced", "value",
    "interval", "paper_value", "statement"}}`` (:func:`spherepde.studies.common.paper_claim`):
    reproduced only when the 95% interval contains the paper's value; never counted as a
    pass or failure of the solver;

  and raises :class:`spherepde.studies.common.StudyPreconditionError` (one-line
  message) when a finiteness or sanity condition fails -- such conditions are
  preconditions, not checks;
* ``plot(results, out_dir) -> list[pathlib.Path]`` -- draws figures from the results.

``spherepde validate`` runs them and writes ``report.md`` and ``report.json``; its headline
counts solver checks passed/total and paper claims reproduced/total separately.
"""

#: The sizes every study defines in ``SIZES`` (:func:`spherepde.studies.common.sizes_table`).
SIZES = ("smoke", "quick", "full")

STUDIES = ("analytic", "structure", "mesh_vs_particles", "paper_section6", "stability", "mesh_convergence", "work_precision", "metastability",
           "circle", "noise")
