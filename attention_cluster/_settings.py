"""Settings from the spectrum: the default regularisation strength.

It is read off the estimated noise sigma and the unit-scale second moment
(``_scale.estimate_spectrum``) once per fit, before any run.
"""

import math

from ._objective import regularizer_code

__all__ = ["auto_reg_strength", "local_reg_strength"]

_REG_FRACTION = 0.1


def local_reg_strength(temperature, n_clusters, regularization="pairwise", noise=0.0):
    """Default rho: a tenth of the strength at which the centroids turn unstable.

    The regulariser is only needed to break the rotation symmetry of the risk
    inside the centroids' span (``math.md`` section 3, "The regulariser's
    strength", where the curvatures below are derived); its cost is a
    negative curvature out of the span, which beyond some rho turns the
    centroids into a saddle and biases the heads (paper, Fig. 2a). Both
    curvatures follow in closed form for the mixture of ``math.md`` section 1
    (unit orthogonal centroids, weights 1/K, noise sigma) as L -> infinity,
    turning head k by an angle phi towards a noise direction, with
    ``beta = lambda K`` and the unbiased temperature (``beta (1/K + sigma^2)
    = 1``):

        risk:        d^2 R / d phi^2 = 2 sigma^2 beta / K
        pairwise r:  d^2 r / d phi^2 = -2 sigma^2 (K - 1) / K
        product r:   d^2 r / d phi^2 = -2 sigma^(2(K-1)) / K

    so the centroids stay a minimum while ``rho < rho_max = lambda K / (K - 1)``
    (pairwise; sigma cancels) or ``lambda K / sigma^(2(K-2))`` (product).
    The default is ``rho = 0.1 rho_max`` for the pairwise regulariser: the
    out-of-span curvature keeps 90% of its value, so the statistical error
    is hardly inflated (it grows as ``(1 - rho/rho_max)^-2``), while inside
    the span the regulariser's curvature, about ``2 rho / K`` per pair of
    heads, dominates the risk's, which vanishes as L grows. On mixtures
    (d = 10..50, K = 2..5, sigma = 0.3..1.2, L = 100) the final distance is
    flat for ``rho / rho_max`` between 0.03 and 0.1 and grows from 0.2 on.
    The product regulariser, whose curvatures both carry an extra
    ``sigma^(2(K-2))``, gets ``rho_pairwise (0.3 / max(sigma, 0.1))^(2(K-2))``,
    calibrated at K = 3 (its setting in the user guide, "The regularisers") for sigma in [0.1, 0.5]. None gets 0.

    Parameters
    ----------
    temperature : float
        lambda.
    n_clusters : int
        K, the number of heads.
    regularization : {"pairwise", "product"} or None, default="pairwise"
    noise : float, default=0.0
        sigma relative to the centroids' scale (``Spectrum.noise``); used by
        the product regulariser only.

    Returns
    -------
    reg_strength : float
    """
    regularizer_code(regularization)
    if regularization is None or n_clusters < 2:
        return 0.0
    # In Python floats: rho beyond float64's range (lambda near its largest
    # numbers) is infinity, without NumPy's warning; auto_reg_strength's
    # global limit, at most 0.25, is then the smaller.
    rho = _REG_FRACTION * float(temperature) * n_clusters / (n_clusters - 1)
    if regularization == "product":
        base, power = 0.3 / max(float(noise), 0.1), 2 * (n_clusters - 2)
        rho *= base**power if power * math.log2(base) < 1023 else math.inf
    return float(rho)


def auto_reg_strength(
    noise, temperature, n_clusters, regularization="pairwise", weakest_signal=None
):
    """Default regularisation strength rho for unit-scale data.

    Too much rho pulls heads off the centroids' span (paper, Fig. 2a). Two
    limits, each derived for large L (``math.md`` section 3, "The
    regulariser's strength"), and rho is the
    smaller of the two:

    - locally, the centroids stop being a minimum at ``rho_max = lambda K /
      (K - 1)`` (pairwise), where the regulariser's negative curvature out
      of the span cancels the risk's; :func:`local_reg_strength` takes a
      tenth of it (scaled for the product
      regulariser);
    - globally, a head on a direction of second moment m lowers the risk by
      ``f(m) = a m^2 (2 - a m)`` with ``a = lambda K``: ``m_s`` on the span
      (``1/K + sigma^2`` for equal weights; in general the K-th eigenvalue
      of the unit-scale second moment, ``weakest_signal``, the lightest
      cluster's direction), ``sigma^2`` off it, while the pairwise
      regulariser costs ``(K - 1) sigma^2 / K`` more on the span. A tenth
      of the ratio of the two, capped at 0.25, keeps the span the minimiser
      when unequal weights make its weakest direction weak.
    """
    local = local_reg_strength(temperature, n_clusters, regularization, noise)
    a = float(temperature) * n_clusters
    s2 = float(noise) ** 2
    m_s = 1.0 / n_clusters + s2 if weakest_signal is None else float(weakest_signal)
    gain = a * m_s**2 * (2.0 - a * m_s) - a * s2**2 * (2.0 - a * s2)
    if not math.isfinite(gain):
        # At a large temperature (a m >> 1) both terms overflow to
        # infinities of one sign, their difference NaN; factored, a [2 (m_s^2
        # - sigma^4) - a (m_s^3 - sigma^6)] overflows to the gain's limit
        # (negative where m_s > sigma^2: rho is 0 there).
        cubes = m_s**3 - s2**3
        inner = 2.0 * (m_s**2 - s2**2) - (a * cubes if cubes != 0.0 else 0.0)
        gain = a * inner if inner != 0.0 else 0.0
    penalty = (n_clusters - 1.0) * s2 / n_clusters
    glob = 0.25 if penalty <= 0.0 else min(0.25, 0.1 * max(gain, 0.0) / penalty)
    return float(min(local, glob))
