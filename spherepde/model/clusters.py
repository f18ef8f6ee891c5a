"""Clusters of a weighted point cloud: the one definition both solvers record (docs/model.md §4.10).

Points x_i (unit, shape (n, d)) with masses w_i -- tokens of mass 1/n, or the mesh solver's
point masses and dense cells -- are linked when closer than a chordal ``radius`` (single
linkage); a connected group holding at least ``min_mass`` of the mass is a cluster.
:func:`weighted_clusters` gives the clusters, :func:`cluster_table` the fixed-size table of
snapshot files; the diagnostics column ``n_clusters`` is the number of clusters.
"""

from __future__ import annotations

import numpy as np

__all__ = ["weighted_clusters", "cluster_table", "CLUSTER_SLOTS", "MERGE_ANGLE", "MIN_CLUSTER_MASS"]

#: The one definition of a merge: two clusters (the mesh solver's point masses, two tokens) have merged
#: when the angle between them is below this (radians). The mesh solver's merge events (``merge_radius``,
#: ``summary.json`` ``"merges"``) and the metastability study's merge times use it (docs/model.md §4.10).
MERGE_ANGLE = 1e-2

#: A cluster holds at least this share of the mass: the cluster count's groups, and the mesh's collapses into point masses.
MIN_CLUSTER_MASS = 0.01


def weighted_clusters(X, w, radius: float = 0.1, min_mass: float = MIN_CLUSTER_MASS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clusters of a weighted point cloud: the one definition both solvers use.

    Points closer than the chordal distance ``radius`` are linked (single linkage); a
    connected group is a cluster when it holds at least ``min_mass`` of the mass. Tokens
    are points of mass 1/n; the mesh solver passes its point masses and the nodes of the
    cells denser than 5/(4 pi) (five times the uniform density) with their masses.

    Parameters
    ----------
    X : (n, d) unit points; w : (n,) non-negative masses.

    Returns
    -------
    labels (n,) int (-1 for points in no cluster), masses (k,), centres (k, d) (the
    normalised mass-weighted means), clusters ordered by decreasing mass.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    X = np.asarray(X, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    n = X.shape[0]
    d = X.shape[1] if X.ndim == 2 else 3
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, d))
    pairs = cKDTree(X).query_pairs(radius, output_type="ndarray")
    g = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n)) if len(pairs) else coo_matrix((n, n))
    _, comp = connected_components(g, directed=False)
    mass = np.bincount(comp, weights=w)
    keep = np.flatnonzero(mass >= min_mass)
    keep = keep[np.argsort(-mass[keep], kind="stable")]
    labels = np.full(n, -1, dtype=np.int64)
    centres = np.zeros((len(keep), d))
    for j, c in enumerate(keep):
        sel = comp == c
        labels[sel] = j
        p = w[sel] @ X[sel]
        nrm = np.linalg.norm(p)
        centres[j] = p / nrm if nrm > 0 else X[sel][0]
    return labels, mass[keep], centres


#: Rows of the cluster table in a snapshot (the largest clusters; unused rows are NaN).
CLUSTER_SLOTS = 16


def cluster_table(X, w, radius: float = 0.1, min_mass: float = MIN_CLUSTER_MASS, slots: int = CLUSTER_SLOTS) -> np.ndarray:
    """The clusters of :func:`weighted_clusters` as a fixed-size table for snapshot files,
    shape (slots, 1 + d): mass, then the centre, by decreasing mass; rows past the number of
    clusters are NaN (so tables of different times stack into one array)."""
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1] if X.ndim == 2 else 3
    _, masses, centres = weighted_clusters(X, w, radius, min_mass)
    out = np.full((slots, 1 + d), np.nan)
    k = min(slots, len(masses))
    out[:k, 0] = masses[:k]
    out[:k, 1:] = centres[:k]
    return out
