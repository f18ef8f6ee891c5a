"""A deliberately wrong scheme fails solver checks of the validation studies.

Two wrong schemes, patched where the mesh solver looks the functions up
(``spherepde.solvers.mesh``):

* a flux of the wrong sign: the finite-volume right-hand side with the edge velocity
  negated (a stable, conservative, positivity-preserving upwind scheme -- for the reversed
  flow). Mass, positivity and every self-convergence rate are blind to it; the analytic
  rates, the rigid rotation and the mesh-to-token order in n are not.
* a first-order scheme claimed as second: ``order=2`` silently runs the first-order
  reconstruction. Only an order check can see it: the rigid rotation's order-2 band.

Measured (smoke): wrong sign -- linear-rate relative error 2.0 (the sign of gamma flips),
rotation errors ~1.2 at every level (orders ~0), mesh-to-token W1 order in n -0.05
(against -0.44 for the correct scheme); order 2 as order 1 -- rotation order 0.82 for
``order=2``.
"""

from __future__ import annotations


def _failed(res):
    return {k: c for k, c in res["checks"].items() if not c["passed"]}


def test_wrong_sign_flux_fails_analytic_checks(wrong_sign_flux):
    from spherepde.studies import analytic

    res = analytic.run("smoke")
    failed = _failed(res)
    rate = next(k for k in res["checks"] if k.startswith("linear rate"))
    assert rate in failed and failed[rate]["measured"] > 1.5  # the rate has the wrong sign: relative error ~2
    assert not res["signs_correct"]
    for order in (1, 2):
        name = f"rigid rotation (quarter turn), order={order}: observed L1 order in h"
        assert name in failed and abs(failed[name]["measured"]) < 0.3, failed[name]  # errors O(1), not converging
    # the quadrature check does not involve the flux and still passes: the failures point at the transport
    assert not any(k.startswith("uniform-state energy") for k in failed)
    assert "Solver checks: 1/4 pass; failed:" in res["summary"]


def test_wrong_sign_flux_fails_mesh_vs_particles_order_in_n(wrong_sign_flux):
    """Self-convergence is blind to a consistently wrong scheme; the order in n of the distance to the tokens is not."""
    from spherepde.studies import mesh_vs_particles

    res = mesh_vs_particles.run("smoke", cases=("repulsive",))
    failed = _failed(res)
    n_check = "repulsive: mesh-to-token W1 at T (finest level), order in n"
    assert n_check in failed and failed[n_check]["measured"] > -0.2, failed
    # every mesh level converges -- to the wrong solution -- so these still pass
    assert res["checks"]["repulsive: W1 between mesh levels at T, order in h"]["passed"]
    assert res["checks"]["repulsive: mass conservation, max |M(t) - 1| over levels and times"]["passed"]


def test_first_order_claimed_as_second_fails_the_order_check(order2_runs_first_order):
    from spherepde.studies import analytic

    res = analytic.run("smoke")
    failed = _failed(res)
    assert set(failed) == {"rigid rotation (quarter turn), order=2: observed L1 order in h"}
    c = failed["rigid rotation (quarter turn), order=2: observed L1 order in h"]
    assert c["measured"] < 1.2 and c["lo"] == 1.8 and c["expected"] == 2.0


def test_correct_scheme_passes_the_same_checks():
    """The control: without the patches the same smoke runs pass every solver check."""
    from spherepde.studies import analytic

    res = analytic.run("smoke")
    assert not _failed(res) and res["signs_correct"]
