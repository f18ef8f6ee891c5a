"""The same start for both levels: a density from the very tokens a particle run draws
(initial.sample), a seeded positive noise field (initial.noise), both refused for particles."""

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.cli.common import example_path


# ----------------------------------------------------------------- the same start for both levels
def test_density_can_start_from_the_token_sample():
    from spherepde.runs.runner import build_initial_density, build_initial_tokens

    cfg = sp.load_config(example_path("clustering-mesh")).with_overrides({"mesh.level": 4, "initial.sample": True})
    tokens_cfg = sp.load_config(example_path("clustering-particles"))
    mesh = sp.icosphere(4)
    X = build_initial_tokens(tokens_cfg)  # the token twin's own start
    assert np.array_equal(build_initial_density(cfg, mesh), densities.from_particles(mesh, X))


def test_uniform_plus_noise_is_seeded_positive_and_normalised():
    from spherepde.runs.runner import build_initial_density

    mesh = sp.icosphere(8)
    base = sp.default_config().with_overrides({"initial.kind": "uniform", "initial.noise": 0.1, "initial.seed": 3})
    a, b = build_initial_density(base, mesh), build_initial_density(base, mesh)
    c = build_initial_density(base.with_overrides({"initial.seed": 4}), mesh)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.sum(a * mesh.areas) == pytest.approx(1.0, abs=1e-12) and a.min() > 0
    assert a.max() / a.min() == pytest.approx(1.1 / 0.9, rel=0.05)  # amplitude 0.1 of max |f| = 1


def test_sample_and_noise_are_refused_for_particles():
    with pytest.raises(sp.ConfigError, match="initial.sample"):
        sp.default_config().with_overrides({"run.solver": "particles", "initial.sample": True})
