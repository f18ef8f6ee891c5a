"""spherepde's validation studies: one importable module per study.

Each study module defines

* ``NAME`` and ``TITLE``;
* ``SIZES`` -- ``{"smoke": {...}, "quick": {...}, "full": {...}}`` parameter sets
  (smoke: seconds, used by the test suite; quick: part of ``spherepde validate --quick``,
  a few minutes in all; full: the complete study);
* ``run(size="quick", **overrides) -> dict`` -- computes; returns JSON-serialisable
  numbers, including ``"summary"`` (a Markdown paragraph that states plainly what was
  and was not reproduced) and ``"checks"`` ({name: bool}, the study's key outcomes);
* ``plot(results, out_dir) -> list[pathlib.Path]`` -- draws figures from the results.

``spherepde validate`` runs them and writes ``report.md`` and ``report.json``.
"""

STUDIES = ("analytic", "structure", "mesh_vs_particles", "paper_section6", "stability")
