"""In-context quantisation of a prompt by a parameter-free attention layer."""

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ._passes import dense_block, gram_matrix, left_times, rows_of, times_power_of_two
from ._scale import estimate_spectrum, gram_coordinates
from ._validation import (
    atomic_fit,
    check_dense_output,
    check_options,
    check_positive,
    factor_for_rows,
    finite_output,
    gathered,
    largest_magnitude,
    power_of_two_unit,
    quiet_finite_check,
    warn,
)
from .layers import in_context_softmax_attention
from .theory import in_context_unbiased_temperature

__all__ = ["InContextQuantizer"]

# The softmax layer's L^2 d multiply-adds beyond which transform warns
# before it starts: about a minute on one core (10.9 s were measured at L =
# 4e4, d = 10, 1.6e10 of them).
_SOFTMAX_WARN_WORK = 1e11


def _prompt(estimator, X, *, reset):
    """X validated against ``estimator`` as one prompt in memory (float32 kept,
    anything else float64; CSR or CSC kept sparse), recording its features
    when ``reset``. A Dask array or DataFrame is computed first (a prompt is
    one matrix; a DataFrame becomes a pandas one, whose column names are its
    feature names), so any chunking of it is taken, after the width its
    graph shows is checked (``_validation.gathered``).
    """
    with quiet_finite_check():
        return validate_data(
            estimator,
            gathered(estimator, X, reset=reset),
            reset=reset,
            accept_sparse=["csr", "csc"],
            dtype=[np.float64, np.float32],
        )


class InContextQuantizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    r"""Quantise a prompt in context with a parameter-free attention layer.

    The rows of X are the L tokens of one prompt. :meth:`transform` returns
    the in-context attention layer of the paper's section 5,
    :math:`T^{\mathrm{ctx}}(X)_\ell = \frac{\lambda K}{L} \sum_k \langle X_\ell, X_k \rangle X_k`
    (:func:`attention_cluster.layers.in_context_attention`), whose keys,
    queries and values are the identity: no parameter is learned, and each
    token is moved towards the centroid of its cluster within the prompt.
    Each output row depends on all the rows of X, the whole prompt (see
    Notes for what this means for scikit-learn's estimator checks).
    Since :math:`T^{\mathrm{ctx}}(X)_\ell = \lambda K M X_\ell` with :math:`M` the prompt's second
    moment, it is one linear map per prompt: with ``temperature="auto"`` and
    L large it keeps the span of the centroids and shrinks the other
    directions by :math:`K \sigma^2 / (1 + K \sigma^2)`.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of clusters K of the prompt (the paper's K = 2): the factor
        ``lambda K / L`` of the layer and, with ``temperature="auto"``, the
        split of the spectrum into signal and noise.
    temperature : "auto" or float, default="auto"
        lambda. A number is applied to X as it is: with
        ``attention="linear"``, ``transform(c X) = c^3 transform(X)``; with
        ``"softmax"``, ``transform(c X)`` is ``c`` times ``transform(X)`` at
        temperature ``c^2 lambda`` (the scores are quadratic in X, so the
        weights change with c). ``"auto"`` is Prop. 5.1's unbiased
        temperature at the prompt's own scale and noise: the overall scale s
        and the noise sigma of the prompt are estimated from its
        second-moment spectrum (the mixture of :mathmd:`1` scaled by s), the
        layer is applied to ``X / s``, whose centroids have unit norm as in
        the paper, at ``lambda = (L / K) / (1 + (d + 2) sigma^2 + (L - 1)
        (1/K + sigma^2))`` (``1/min(K, d)`` for ``1/K`` where K > d:
        :func:`~attention_cluster.theory.in_context_unbiased_temperature`),
        and the result is multiplied back by s. The
        output is unbiased for each token's centroid up to the error of
        those estimates, which vanishes as L grows (for K >= d the linear
        layer is then about the identity, and :meth:`fit` warns): with few
        tokens per feature the noise's smallest sample eigenvalues, from which sigma
        is estimated, fall below sigma^2, and the output is shrunk towards
        zero (to about 0.7 of the centroid at L = 20, d = 10, sigma = 1;
        0.97 at L = 500). Hence
        ``transform(c X) = c transform(X)`` for ``c > 0``, with no overflow
        or underflow for finite X of any normal magnitude (tested from
        ``1e-300`` to ``1e150``). A softmax layer takes any finite
        temperature: where ``lambda <x_l, x_k>`` passes float64's range its
        weights are their limit, the hard argmax; a linear layer's output
        beyond that range raises a FloatingPointError. At a given temperature
        the softmax layer forms the tokens' inner products as they are:
        tokens whose products pass the dtype's range (entries beyond about
        1e154, 1.8e19 for float32) raise a FloatingPointError, which
        ``"auto"``, reading them at unit scale, does not.
    attention : {"linear", "softmax"}, default="linear"
        ``"linear"``: the layer above, ``O(L d min(L, d))``. ``"softmax"``: its softmax
        counterpart ``sum_k softmax_k(lambda <X_l, X_k>) X_k``
        (:func:`attention_cluster.layers.in_context_softmax_attention`),
        ``O(L^2 d)``, so only for prompts of up to some ``10^4`` tokens. The
        paper has no theory for it: with ``"auto"`` it gets the same
        unit-scale prompt and temperature as the linear layer, which centres
        its output on the centroids only approximately.

    Attributes
    ----------
    n_clusters_ : int
        ``n_clusters`` as validated by :meth:`fit`.
    temperature_ : "auto" or float
        ``temperature`` as validated by :meth:`fit`: ``"auto"`` is resolved
        for each prompt by :meth:`transform`.
    attention_ : {"linear", "softmax"}
        ``attention`` as validated by :meth:`fit`.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of features seen during :meth:`fit`, when X has string column
        names.

    See Also
    --------
    attention_cluster.layers.in_context_attention : The layer on batches of prompts.

    Notes
    -----
    The output of a token depends on the whole prompt by design, so
    transforming a subset of the rows is not the subset of the transformed
    rows. For that reason ``check_estimator(InContextQuantizer())`` from
    scikit-learn reports one failure, ``check_methods_subset_invariance``,
    a check that assumes row-wise outputs; every other check passes. To run
    the checks, declare that one as expected, as the project's own tests do
    (``tests/test_common.py``)::

        check_estimator(
            InContextQuantizer(),
            expected_failed_checks={
                "check_methods_subset_invariance": "outputs depend on the whole prompt"
            },
        )

    The layer outputs approximate centroids, not labels (user guide,
    :doc:`/user_guide/in_context`). It
    has no heads to assign tokens by ``argmax_h <x, mu_h>``, and the top
    eigenvectors of the prompt's second moment cannot serve as heads: with
    clusters of equal weight, the top K eigenvalues are equal, so any
    rotation of the centroids inside their span is an eigenbasis. The recipe
    is instead to cluster the quantised tokens, which concentrate around
    the centroids: ``make_pipeline(InContextQuantizer(K), KMeans(K))``.
    KMeans' centres then play the heads, and its nearest-centre assignment
    is the ``argmax_h <x, mu_h>`` rule when the centres have equal norms.
    This labels as well as KMeans alone on the paper's mixtures, not better:
    the noise inside the centroids' span, which limits the labels, is left
    as it is (``benchmarks/quantizer_pipeline.py``).

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster import InContextQuantizer
    >>> from attention_cluster.datasets import make_mixture
    >>> X, y, C = make_mixture(500, 10, 2, noise=0.3, random_state=0)
    >>> Xq = InContextQuantizer(n_clusters=2).fit_transform(X)
    >>> Xq.shape
    (500, 10)
    >>> def mse(A):  # mean squared distance of each token to its centroid
    ...     return float(np.mean(np.sum((A - C[y]) ** 2, axis=1)))
    >>> bool(mse(Xq) < 0.5 * mse(X))
    True

    Labels by the recipe above:

    >>> from sklearn.cluster import KMeans
    >>> from sklearn.metrics import adjusted_rand_score
    >>> from sklearn.pipeline import make_pipeline
    >>> model = make_pipeline(InContextQuantizer(2), KMeans(2, n_init=3, random_state=0))
    >>> bool(adjusted_rand_score(y, model.fit_predict(X)) > 0.9)
    True
    """

    def __init__(self, n_clusters=2, *, temperature="auto", attention="linear"):
        self.n_clusters = n_clusters
        self.temperature = temperature
        self.attention = attention

    @atomic_fit
    def fit(self, X, y=None):
        """Validate the parameters and record them and the number of features.

        The layer has no learned parameter (paper, section 5): fitting only
        fixes the parameters and the feature space that :meth:`transform`
        uses (``n_clusters_``, ``temperature_``, ``attention_``): as in
        scikit-learn's estimators, a parameter set after fit takes effect,
        validated, at the next fit.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Tokens of a prompt.
        y : None
            Ignored.

        Returns
        -------
        self : InContextQuantizer
            Fitted estimator.
        """
        n_clusters = check_positive(
            self.n_clusters, "n_clusters", Integral, min_val=1, strict=False, float_range=True
        )
        temperature = check_positive(self.temperature, "temperature", also=("auto",))
        attention = check_options(self.attention, "attention", ["linear", "softmax"])
        _prompt(self, X, reset=True)
        if (
            attention == "linear"
            and isinstance(temperature, str)
            and n_clusters >= self.n_features_in_
        ):
            # math.md section 4: the unbiased map fixes K >= d centroids, which span R^d.
            warn(
                f"InContextQuantizer(n_clusters={int(n_clusters)}) on {self.n_features_in_} "
                "features: with as many clusters as features or more, the linear layer cannot "
                "move tokens towards their centroids (a linear map that fixes centroids "
                "spanning the feature space is the identity). At temperature='auto' it is "
                "unbiased where the centroids form a tight frame, and leaves the tokens about "
                "where they are; for other centroids it is biased. Cluster the rows instead "
                "(AttentionClustering, KMeans), or pass fewer clusters than features.",
                UserWarning,
            )
        self.n_clusters_ = int(n_clusters)
        self.temperature_ = "auto" if isinstance(temperature, str) else float(temperature)
        self.attention_ = str(attention)
        return self

    def transform(self, X):
        """Quantise the prompt whose tokens are the rows of X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The L tokens of one prompt. The linear layer does not densify
            sparse X: it is ``X (lambda K M)`` with the d x d second moment
            ``M`` of the prompt, or, with fewer tokens than features,
            ``(lambda K / L) (X X^T) X`` with the L x L Gram matrix (a sparse
            product), which then gives ``"auto"`` its spectrum too:
            ``O(L d min(L, d))`` time. The softmax layer's L x L scores and
            its output are dense, so it reads a sparse prompt densely (a
            dense copy of the size of its output, scaled in place).

        Returns
        -------
        X_quantized : ndarray of shape (n_samples, n_features)
            ``T^ctx(X)``, float32 if X is float32 and float64 otherwise.

        Raises
        ------
        ValueError
            For sparse X whose dense output would take more than 1 GiB and
            more than ten times the bytes of X's non-zeros, before any work.
        """
        check_is_fitted(self)
        X = _prompt(self, X, reset=False)
        # (Each output row reads the whole prompt: no advice of fewer rows.)
        check_dense_output(X, "transform", row_wise=False)
        rows = rows_of(X, n_threads=1)
        L, d = X.shape
        if self.attention_ == "softmax" and float(L) * L * d > _SOFTMAX_WARN_WORK:
            warn(
                f"InContextQuantizer(attention='softmax') on a prompt of {L} tokens of {d} "
                f"features: its L x L attention takes L^2 d = {float(L) * L * d:.2g} "
                "multiply-adds, a minute or more (the linear layer takes L d min(L, d)). Each "
                "transform call is one prompt: transform fewer rows at a time, or use "
                "attention='linear'.",
                UserWarning,
            )
        K = self.n_clusters_
        unit = 1.0  # the power of two the spectrum's scale is divided by
        gram = None
        if L < d and (self.attention_ == "linear" or self.temperature_ == "auto"):
            # Fewer tokens than features: the layer and the spectrum are read
            # from the L x L Gram matrix, O(L^2 d), not from the d x d second
            # moment, O(L d^2 + d^3). It is formed of X / unit, unit the power
            # of two of X's largest entry (exact), whose products stay within
            # float64 at any magnitude of X. (The softmax layer at a given
            # temperature needs neither.)
            unit = power_of_two_unit(rows.peak())
            gram = gram_matrix(X, -_exponent(unit))  # of X / unit
        if self.temperature_ == "auto":
            if gram is not None:
                spectrum = _gram_spectrum(gram, rows.rescaled(unit), K)
            else:
                spectrum = estimate_spectrum(rows, K)
                if not np.isfinite(spectrum.scale):
                    # Rows whose norms pass float64 (entries near its largest
                    # numbers): the spectrum of X times the power of two at or
                    # below its largest entry (exact), whose scale s / unit is
                    # finite, as s / peak is.
                    unit = power_of_two_unit(rows.peak())
                    X_unit = times_power_of_two(X, -_exponent(unit))
                    spectrum = estimate_spectrum(rows_of(X_unit, n_threads=1), K)
            temperature = float(
                in_context_unbiased_temperature(spectrum.noise, L, n_features=d, n_clusters=K)
            )
        else:
            spectrum, temperature = None, self.temperature_
        if self.attention_ == "linear":
            # An output beyond the dtype's range is refused by finite_output.
            with np.errstate(over="ignore", invalid="ignore"):
                if gram is not None:
                    # The same layer as (lambda K / L) (X X^T) X (math.md
                    # section 2). With X X^T = unit^2 G, G the Gram matrix of
                    # X / unit, and s the scale of its spectrum, s T^ctx(X / s)
                    # is (lambda K / (L s^2)) G X: one product of an L x L
                    # matrix with X, at the magnitude of X. A given temperature
                    # takes the factor (lambda K unit) unit / L.
                    if spectrum is None:
                        factor = (temperature * K * unit) * unit / L
                    else:
                        factor = temperature * K / (L * spectrum.scale**2)
                    gram *= factor  # (in place: the Gram matrix is this call's own)
                    out = left_times(factor_for_rows(gram, X.dtype), X, X.dtype)
                else:
                    # s T^ctx(X / s)_l = lambda K (X^T X / (L s^2)) X_l, and
                    # X^T X / (L s^2) is the spectrum's unit-scale moment,
                    # accumulated without overflow: one product with a d x d
                    # matrix, at the magnitude of X. A given temperature
                    # multiplies the moment at X's own magnitude c^2, taken as
                    # (lambda K c) c times the unit-scale moment M / c^2: the
                    # context is finite whenever it is representable. The
                    # moment, this call's own, is multiplied in place: of
                    # float32 rows the product is cast to float32 after, and
                    # a float64 copy of the d x d context would be a second
                    # one held beside it.
                    if spectrum is None:
                        c, context = rows.scaled_second_moment()
                        context *= (temperature * K * c) * c
                    else:
                        # (The spectrum is this call's, not read after.)
                        context = spectrum.moment
                        context *= temperature * K
                    # Sparse rows are read in float64 (SparseRows), and so is
                    # their product: each chunk's is cast to X's dtype.
                    context = factor_for_rows(context, X.dtype)
                    if rows.sparse:
                        # SciPy's sparse product takes the dense factor in C
                        # order: copied once here, not at every chunk.
                        context = np.ascontiguousarray(context)
                    out = rows.map_rows(_times, context, X.dtype, dtype=X.dtype, columns=d)
            return finite_output(out)
        # Dense X as it is (the layer copies nothing of it); sparse X densified.
        tokens = rows.map_rows(dense_block, X.dtype, dtype=X.dtype, columns=d) if rows.sparse else X
        if spectrum is None:
            return in_context_softmax_attention(tokens, temperature=temperature)
        # Divide by the largest entry first, then by the remaining unit-scale
        # factor of s, so that X / s neither overflows nor underflows (s and
        # the peak both divided by the spectrum's power of two).
        peak = largest_magnitude(tokens)
        if peak == 0.0:
            return np.zeros_like(tokens)
        unit_scale = spectrum.scale / (peak / unit)
        # The densified copy of sparse tokens is the layer's own: divided in place.
        X_unit = tokens if tokens is not X else tokens / peak
        if tokens is not X:
            X_unit /= peak
        X_unit /= unit_scale
        out = in_context_softmax_attention(X_unit, temperature=temperature)
        out *= unit_scale
        out *= peak
        return finite_output(out, temperature_helps=False)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Both layers compute in the precision of their input.
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags


def _exponent(unit):
    """``e`` of a power of two ``unit = 2^e``."""
    return int(np.frexp(unit)[1]) - 1


def _gram_spectrum(gram, rows, n_clusters):
    """``estimate_spectrum`` of L rows in R^d, L < d, from their Gram matrix ``X X^T``.

    With ``X = U S V^T``, the eigenvalues of the d x d moment ``X^T X / L``
    are those of ``X X^T / L``, ``S^2 / L``, and ``d - L`` zeros. The rows'
    coordinates on their principal axes, ``X V = U S`` (L numbers a row),
    have the moment's non-zero eigenvalues: ``estimate_spectrum`` takes them
    as the coordinates of ``rows`` in a principal subspace (its ``full``) and
    reads the noise as the mean of the d - K smallest eigenvalues in R^d, the
    zeros among them, from the rows' trace (math.md section 7, "Scale and
    noise from the spectrum"). With ``K >= L`` every non-zero eigenvalue is
    signal and the noise is zero, as the d x d moment gives it, to rounding
    (at most its smallest eigenvalue, zero, when ``K >= d``).
    """
    coordinates = gram_coordinates(gram)
    return estimate_spectrum(rows_of(coordinates, n_threads=1), n_clusters, full=rows)


def _times(rows, context, dtype):
    """``rows @ context`` as a dense array of ``dtype`` (rows dense or sparse)."""
    return np.asarray(rows @ context).astype(dtype, copy=False)
