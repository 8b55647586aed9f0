"""Geometry of the product of unit spheres, one sphere per head (``math.md`` section 3).

The heads are the columns of a ``d x K`` matrix U. The tangent space at U
holds the Z with ``<u_h, z_h> = 0`` for every head; the Riemannian gradient
is the Euclidean one projected on it, and a step is brought back to the
spheres by normalising each head (the retraction), as in pymanopt's
``Sphere``. Used by the exact solver's optimiser (``_optimize``) and by
:func:`attention_cluster.theory.population_pgd`; PSGD's Numba kernel
(``_kernels.sphere_step``) takes the same step row by row.
"""

import numpy as np

__all__ = ["normalize_heads", "project_tangent", "random_heads", "retract"]


def project_tangent(U, Z):
    """Project Z onto the tangent space at U: ``z_h - <u_h, z_h> u_h`` per head.

    Z is ``d x K``, or a stack of them (``... x d x K``), each projected.
    """
    return Z - U * np.sum(U * Z, axis=-2, keepdims=True)


def retract(U, Z):
    """Retraction by normalisation: ``(u_h + z_h) / ||u_h + z_h||`` per head."""
    V = U + Z
    return V / np.linalg.norm(V, axis=0)


def normalize_heads(U):
    """Each column divided by its norm; a zero or non-finite column is an error.

    A column whose squares leave float64's range (entries beyond about
    1e154, or whose norm is below ``_NEAR_UNDERFLOW``) is first divided by its
    largest entry, so that heads of any finite magnitude have a direction
    (``init=H * 1e-200`` fitted as ``H``, while the same heads failed in
    ``theory``'s functions)."""
    U = np.array(U, dtype=np.float64)
    if not np.all(np.isfinite(U)):
        raise ValueError("Initial heads must be finite and non-zero.")
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(U, axis=0)
    far = ~(np.isfinite(norms) & (norms >= _NEAR_UNDERFLOW))
    if far.any():
        peaks = np.max(np.abs(U[:, far]), axis=0)
        if np.any(peaks == 0):
            raise ValueError("Initial heads must be finite and non-zero.")
        scaled = U[:, far] / peaks
        U[:, far] = scaled
        norms[far] = np.linalg.norm(scaled, axis=0)
    return U / norms


# Norms below which a column's squares lose digits to float64's subnormal range.
_NEAR_UNDERFLOW = 1e-140


def random_heads(rng, n_features, n_heads):
    """Heads drawn uniformly on the sphere: a ``n_features x n_heads`` array of unit columns.

    The normals come from a generator seeded by one integer drawn from
    ``rng`` (a RandomState), not from ``rng``'s own normals:
    :func:`attention_cluster.datasets.make_centroids` draws the centroids of
    :func:`~attention_cluster.datasets.make_mixture` as the first normals of
    its seed's stream, so that heads drawn the same way with the data's seed
    would start on the true centroids.
    """
    stream = np.random.RandomState(rng.randint(2**31 - 1))
    U = stream.standard_normal((n_features, n_heads))
    return U / np.linalg.norm(U, axis=0)
