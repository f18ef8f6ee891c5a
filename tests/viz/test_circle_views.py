"""Views of runs on the circle (spherepde.viz.circle): the theta-t map (kymograph) shows the
density or the tokens' histogram at the right angles and times, profiles draw the density against
theta, and ``spherepde plot`` picks them for d = 2 runs."""

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.viz.circle import angles, arc_edges, plot_kymograph, plot_profiles, token_histograms


def _on_circle(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def test_angles_and_arc_edges():
    th = np.array([0.1, 1.0, 3.0, 6.0])
    assert np.allclose(angles(_on_circle(th)), th)
    assert angles(_on_circle(np.array([-0.5])))[0] == pytest.approx(2 * np.pi - 0.5)
    nc = 16
    nodes = (np.arange(nc) + 0.5) * 2 * np.pi / nc  # a uniform mesh: edges are the cell boundaries
    assert np.allclose(arc_edges(np.random.default_rng(1).permutation(nodes)), np.arange(nc + 1) * 2 * np.pi / nc)
    with pytest.raises(ValueError, match="2 coordinates"):
        angles(np.zeros((3, 3)))


def test_token_histograms_are_densities_in_theta_at_the_right_bins():
    th = np.array([[0.1, 0.2, 3.3, 6.2], [1.0, 1.0, 1.0, 4.0]])
    hist, edges = token_histograms(_on_circle(th), bins=8)
    w = 2 * np.pi / 8
    assert np.allclose(hist.sum(axis=1) * w, 1.0)
    assert hist[0, 0] == pytest.approx(0.5 / w) and hist[0, 4] == pytest.approx(0.25 / w) and hist[0, 7] == pytest.approx(0.25 / w)
    assert hist[1, 1] == pytest.approx(0.75 / w) and hist[1, 5] == pytest.approx(0.25 / w)
    assert np.allclose(edges, np.linspace(0, 2 * np.pi, 9))


def test_the_kymograph_colours_each_cell_at_its_angle_and_time():
    nc, S = 12, 3
    nodes = (np.arange(nc) + 0.5) * 2 * np.pi / nc
    perm = np.random.default_rng(0).permutation(nc)  # cells in any order: drawn by angle
    rho = np.arange(S)[:, None] * 100 + np.arange(nc)[None, :]  # value = 100 t_index + cell index by angle
    fig = plot_kymograph(np.arange(S, dtype=float), theta=nodes[perm], rho=rho[:, perm])
    quad = fig.axes[0].collections[0]
    assert np.array_equal(np.asarray(quad.get_array()).reshape(S, nc), rho)
    assert np.allclose(quad.get_coordinates()[0, :, 0], np.arange(nc + 1) * 2 * np.pi / nc)


def test_the_token_kymograph_is_their_histogram_with_the_clusters_marked():
    rng = np.random.default_rng(2)
    th = np.mod(rng.normal(1.0, 0.05, size=(4, 50)), 2 * np.pi)
    X = _on_circle(th)
    pts = [np.array([[1.0, np.cos(1.0), np.sin(1.0)]])] * 4
    fig = plot_kymograph(np.arange(4.0), tokens=X, points=pts, bins=32)
    hist, _ = token_histograms(X, 32)
    assert np.allclose(np.asarray(fig.axes[0].collections[0].get_array()).reshape(4, 32), hist)
    marks = fig.axes[0].collections[1].get_offsets()
    assert np.allclose(marks[:, 0], 1.0)
    fig2 = plot_profiles(None, None, np.arange(4.0), [0, 3], tokens=X, points=pts, bins=32)
    assert len(fig2.axes[0].patches) == 2  # one histogram step line per time
    with pytest.raises(ValueError, match="needs densities rho or tokens"):
        plot_kymograph(np.arange(2.0))


def test_plot_draws_the_circle_views_of_a_token_run(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(["run", "--set", "run.solver=particles", "--set", "model.d=2", "--set", "initial.n=40", "--set", "solver.T=0.2",
                 "--set", "model.H=1", "--set", "output.snapshot_dt=0.1", "--set", "output.vtk=false", "--out", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    assert main(["plot", str(out)]) == 0
    names = {p.name for p in (out / "figures").iterdir()}
    assert "kymograph.png" in names and any(n.startswith("profiles_t") for n in names)
    assert not any(n.startswith("tokens_map") for n in names)  # the sphere's maps are not drawn for d = 2


def test_the_kymograph_marks_the_predicted_angles():
    nodes = (np.arange(8) + 0.5) * 2 * np.pi / 8
    fig = plot_kymograph(np.arange(2.0), theta=nodes, rho=np.ones((2, 8)), predicted=[0.5, 0.5 + 2 * np.pi])
    xs = sorted(ln.get_xdata()[0] for ln in fig.axes[0].lines)
    assert np.allclose(xs, [0.5, 0.5])  # angles taken mod 2 pi
