"""The attention layers against direct O(L^2) NumPy formulas, and their symmetries."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.special import logsumexp, softmax

from attention_cluster import layers
from attention_cluster.layers import (
    in_context_attention,
    in_context_softmax_attention,
    linear_attention,
    softmax_attention,
)

# ---------------------------------------------------------------------------
# Slow, obviously correct references (math.md section 2), with the L x L
# attention matrix written out.


def ref_linear(X, heads, temperature, n_clusters):
    L = X.shape[-2]
    scores = np.einsum("...li,hi,hj,...kj->...lk", X, heads, heads, X)
    return (temperature * n_clusters / L) * np.einsum("...lk,...kd->...ld", scores, X)


def ref_in_context(X, temperature, n_clusters):
    L = X.shape[-2]
    scores = np.einsum("...li,...ki->...lk", X, X)
    return (temperature * n_clusters / L) * np.einsum("...lk,...kd->...ld", scores, X)


def ref_in_context_by_features(X, temperature, n_clusters):
    """The same layer written with the d x d Gram matrix, (lambda K / L) (X^T X) X_l."""
    L = X.shape[-2]
    gram = np.einsum("...ki,...kj->...ij", X, X)
    return (temperature * n_clusters / L) * np.einsum("...ij,...lj->...li", gram, X)


def ref_softmax(X, heads, temperature):
    out = np.zeros_like(X)
    for mu in heads:
        a = X @ mu
        weights = softmax(temperature * a[..., :, None] * a[..., None, :], axis=-1)
        out += np.einsum("...lk,...kd->...ld", weights, X)
    return out


def ref_in_context_softmax(X, temperature):
    weights = softmax(temperature * np.einsum("...li,...ki->...lk", X, X), axis=-1)
    return np.einsum("...lk,...kd->...ld", weights, X)


LAYERS = {
    "linear": (
        lambda X, H, t: linear_attention(X, H, temperature=t, n_clusters=3),
        lambda X, H, t: ref_linear(X, H, t, 3),
    ),
    "softmax": (
        lambda X, H, t: softmax_attention(X, H, temperature=t),
        ref_softmax,
    ),
    "in_context": (
        lambda X, H, t: in_context_attention(X, temperature=t, n_clusters=3),
        lambda X, H, t: ref_in_context(X, t, 3),
    ),
    "in_context_softmax": (
        lambda X, H, t: in_context_softmax_attention(X, temperature=t),
        lambda X, H, t: ref_in_context_softmax(X, t),
    ),
}
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-11}


def assert_close(actual, expected, rtol=1e-12):
    """Equal to ``rtol`` of each entry or of the largest: two sums of one
    formula in different orders differ by rounding relative to the output's
    scale, not to an entry that cancels (seed 46: 6e-17 on 4e-5)."""
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(
    "shape",
    [(17, 5), (4, 17, 5), (5, 17), (4, 5, 17)],
    ids=["prompt", "batch", "short-prompt", "short-batch"],
)
@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_match_direct_formulas(name, shape, dtype, global_random_seed):
    rng = np.random.default_rng([global_random_seed, 0])
    X = rng.standard_normal(shape).astype(dtype)
    heads = rng.standard_normal((2, shape[-1])).astype(dtype)
    layer, reference = LAYERS[name]
    out = layer(X, heads, 0.7)
    expected = reference(X.astype(np.float64), heads.astype(np.float64), 0.7)
    assert out.dtype == dtype
    assert out.shape == X.shape
    np.testing.assert_allclose(
        out, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype] * np.abs(expected).max()
    )


def test_linear_attention_counts_heads_by_default(global_random_seed):
    rng = np.random.default_rng([global_random_seed, 1])
    X = rng.standard_normal((9, 4))
    heads = rng.standard_normal((3, 4))
    assert_close(linear_attention(X, heads, temperature=0.4), ref_linear(X, heads, 0.4, 3))


def test_in_context_attention_is_the_sum_of_d_orthonormal_heads(global_random_seed):
    # Paper, section 5: d orthonormal linear heads add up to the identity.
    rng = np.random.default_rng([global_random_seed, 2])
    X = rng.standard_normal((3, 11, 4))
    basis = np.linalg.qr(rng.standard_normal((4, 4)))[0].T
    assert_close(
        in_context_attention(X, temperature=0.3, n_clusters=2),
        linear_attention(X, basis, temperature=0.3, n_clusters=2),
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(
    "shape", [(6, 3, 40), (6, 40, 3), (6, 7, 7), (1, 1, 9)], ids=["L<d", "L>d", "L=d", "L=1"]
)
@pytest.mark.parametrize("budget", [None, 50], ids=["one-block", "blocks"])
def test_in_context_routes_agree(monkeypatch, budget, shape, dtype, global_random_seed):
    # The layer takes (X X^T) X when L < d and X (X^T X) otherwise, by blocks
    # of prompts: both equal both references (the L x L and the d x d Gram
    # matrix), in one block and in blocks of one or a few prompts.
    if budget is not None:
        monkeypatch.setattr(layers, "_SCORE_BUDGET", budget)
    rng = np.random.default_rng([global_random_seed, 6])
    X = rng.standard_normal(shape).astype(dtype)
    out = in_context_attention(X, temperature=0.6, n_clusters=3)
    assert out.dtype == dtype
    X64 = X.astype(np.float64)
    for reference in [ref_in_context, ref_in_context_by_features]:
        expected = reference(X64, 0.6, 3)
        assert_close(out, expected, rtol=TOLERANCE[dtype])


def test_toy_prompt_by_hand():
    # Orthogonal tokens: T^ctx(X)_l = (lambda K / L) ||X_l||^2 X_l, here with
    # lambda K / L = 1: (2, 0) -> 4 (2, 0) and (0, 1) -> (0, 1).
    X = np.array([[2.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(in_context_attention(X, temperature=1.0), [[8.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize(
    "budget, shape",
    [(50, (3, 6, 2)), (7, (2, 6, 2)), (1, (1, 5, 3))],
    ids=["prompt-chunks", "row-blocks", "one-row"],
)
def test_softmax_blocks_match_reference(monkeypatch, budget, shape, global_random_seed):
    monkeypatch.setattr(layers, "_SCORE_BUDGET", budget)
    rng = np.random.default_rng([global_random_seed, 3])
    X = rng.standard_normal(shape)
    heads = rng.standard_normal((2, shape[-1]))
    assert_close(softmax_attention(X, heads, temperature=1.3), ref_softmax(X, heads, 1.3))
    assert_close(in_context_softmax_attention(X, temperature=1.3), ref_in_context_softmax(X, 1.3))


def test_softmax_long_prompt_does_not_overflow(global_random_seed):
    # L = 10000 tokens and scores up to ~1e4: exp would overflow without the
    # log-sum-exp shift, and the L x L scores would take 800 MB at once.
    rng = np.random.default_rng([global_random_seed, 4])
    X = 3.0 * rng.standard_normal((10_000, 3))
    temperature = 300.0
    out = in_context_softmax_attention(X, temperature=temperature)
    assert np.all(np.isfinite(out))
    rows = [0, 4321, 9999]
    for l in rows:
        log_w = temperature * (X @ X[l])
        expected = np.exp(log_w - logsumexp(log_w)) @ X
        np.testing.assert_allclose(out[l], expected, rtol=1e-9, atol=1e-9)
    out_heads = softmax_attention(X, [[1.0, 0.0, 0.0]], temperature=temperature)
    log_w = temperature * X[rows, 0, None] * X[None, :, 0]
    expected = np.exp(log_w - logsumexp(log_w, axis=1, keepdims=True)) @ X
    np.testing.assert_allclose(out_heads[rows], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", list(LAYERS))
def test_integer_input_gives_float64(name):
    layer, _ = LAYERS[name]
    X = np.arange(12).reshape(4, 3) % 5
    assert layer(X, np.eye(3)[:2], 0.5).dtype == np.float64


# ---------------------------------------------------------------------------
# Symmetries, by Hypothesis.

finite = st.floats(-3.0, 3.0, allow_nan=False, allow_subnormal=False)
prompts = st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 5)).flatmap(
    lambda shape: hnp.arrays(np.float64, shape, elements=finite)
)


def _close(actual, expected):
    atol = 1e-10 * max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=atol)


def _orthogonal(d, seed):
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]


@given(X=prompts, seed=st.integers(0, 2**32 - 1), name=st.sampled_from(list(LAYERS)))
def test_permuting_tokens_permutes_outputs(X, seed, name):
    layer, _ = LAYERS[name]
    rng = np.random.default_rng(seed)
    heads = rng.standard_normal((2, X.shape[-1]))
    perm = rng.permutation(X.shape[1])
    _close(layer(X[:, perm], heads, 0.8), layer(X, heads, 0.8)[:, perm])


@given(X=prompts, seed=st.integers(0, 2**32 - 1), name=st.sampled_from(list(LAYERS)))
def test_rotating_features_rotates_outputs(X, seed, name):
    # Heads rotate with the features; the in-context layers have none.
    layer, _ = LAYERS[name]
    R = _orthogonal(X.shape[-1], seed)
    heads = np.random.default_rng(seed).standard_normal((2, X.shape[-1]))
    _close(layer(X @ R, heads @ R, 0.8), layer(X, heads, 0.8) @ R)


@given(X=prompts, c=st.floats(0.01, 100.0), name=st.sampled_from(["linear", "in_context"]))
def test_linear_layers_are_cubic_at_fixed_temperature(X, c, name):
    layer, _ = LAYERS[name]
    heads = np.eye(X.shape[-1])[:1]
    _close(layer(c * X, heads, 0.8), c**3 * layer(X, heads, 0.8))


@given(X=prompts, c=st.floats(0.1, 10.0), name=st.sampled_from(["softmax", "in_context_softmax"]))
def test_softmax_layers_take_a_scale_of_x_as_a_temperature(X, c, name):
    # The scores are quadratic in X: T_lambda(c X) = c T_{c^2 lambda}(X), not
    # c^3 T(X) (InContextQuantizer's docstring states both cases).
    layer, _ = LAYERS[name]
    heads = np.eye(X.shape[-1])[:1]
    _close(layer(c * X, heads, 0.8), c * layer(X, heads, 0.8 * c * c))


@given(X=prompts, name=st.sampled_from(["softmax", "in_context_softmax"]))
def test_softmax_outputs_are_convex_combinations_of_tokens(X, name):
    layer, _ = LAYERS[name]
    out = layer(X, np.ones((1, X.shape[-1])), 5.0)  # one head
    slack = 1e-12 * max(1.0, float(np.abs(X).max()))
    assert np.all(out <= X.max(axis=1, keepdims=True) + slack)
    assert np.all(out >= X.min(axis=1, keepdims=True) - slack)


# ---------------------------------------------------------------------------
# Bad input: a clear error, never NaN.

BAD_PROMPTS = [
    (np.array([[1.0, np.nan]]), "NaN or infinity"),
    (np.array([[1.0, np.inf]]), "NaN or infinity"),
    (np.zeros((0, 3)), "empty"),
    (np.zeros((2, 0)), "empty"),
    (np.zeros((0, 4, 3)), "empty"),
    (np.ones(3), r"shape \(L, d\)"),
    (np.ones((1, 2, 3, 4)), r"shape \(L, d\)"),
    (np.ones((2, 3), dtype=complex), "Complex"),
    (np.array([["a", "b"]]), "real numeric"),
    ([np.ones((2, 3)), np.ones((3, 3))], "prompts of different lengths"),
]
BAD_PROMPT_IDS = [
    "nan",
    "inf",
    "no-token",
    "no-feature",
    "no-prompt-token",
    "1d",
    "4d",
    "complex",
    "str",
    "ragged",
]


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("X, match", BAD_PROMPTS, ids=BAD_PROMPT_IDS)
def test_bad_prompts_raise(name, X, match):
    layer, _ = LAYERS[name]
    with pytest.raises(ValueError, match=match):
        layer(X, np.ones((1, 3)), 1.0)


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize(
    "kind",
    [sp.csr_matrix, sp.csc_array, sp.coo_matrix],
    ids=["csr_matrix", "csc_array", "coo_matrix"],
)
def test_sparse_prompts_raise_and_say_to_densify(name, kind):
    # Read as a 0-d object array: "X must be a real numeric array, got dtype object".
    layer, _ = LAYERS[name]
    with pytest.raises(TypeError, match=r"dense prompts only.*X\.toarray\(\)"):
        layer(kind(np.eye(3)), np.ones((1, 3)), 1.0)


@pytest.mark.parametrize("temperature", [0.0, -1.0, np.inf, np.nan, True, np.True_, "auto", "1"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_bad_temperature_raises(name, temperature):
    layer, _ = LAYERS[name]
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        layer(np.ones((2, 3)), np.ones((1, 3)), temperature)


@pytest.mark.parametrize(
    "temperature", [np.array([1.0, 2.0, 3.0]), [[1.0], [2.0]], np.ones((2, 3))]
)
@pytest.mark.parametrize("name", list(LAYERS))
def test_temperature_of_several_numbers_raises(name, temperature):
    # lambda is one number of the layer (math.md section 2): an array would
    # broadcast over features, heads or keys instead.
    layer, _ = LAYERS[name]
    with pytest.raises(ValueError, match="temperature must be one number"):
        layer(np.ones((2, 3)), np.ones((1, 3)), temperature)


@pytest.mark.parametrize("name", list(LAYERS))
def test_zero_dimensional_temperature_is_a_number(name, global_random_seed):
    layer, _ = LAYERS[name]
    X = np.random.default_rng(global_random_seed).standard_normal((5, 3))
    heads = np.ones((1, 3))
    np.testing.assert_array_equal(layer(X, heads, np.array(0.7)), layer(X, heads, 0.7))


@pytest.mark.parametrize(
    "heads, match",
    [
        (np.ones((1, 4)), "shape"),
        (np.ones((0, 3)), "shape"),
        (np.ones(3), "shape"),
        ([[np.nan, 1.0, 1.0]], "NaN"),
    ],
    ids=["wrong-d", "no-head", "1d", "nan"],
)
@pytest.mark.parametrize("layer", [linear_attention, softmax_attention])
def test_bad_heads_raise(layer, heads, match):
    with pytest.raises(ValueError, match=match):
        layer(np.ones((2, 3)), heads)


@pytest.mark.parametrize("n_clusters", [0, 1.5, True, np.nan, np.inf])
@pytest.mark.parametrize(
    "layer", [in_context_attention, lambda X, **kw: linear_attention(X, np.eye(3), **kw)]
)
def test_bad_n_clusters_raises(layer, n_clusters):
    with pytest.raises(ValueError, match="n_clusters must be an integer >= 1"):
        layer(np.ones((2, 3)), n_clusters=n_clusters)


@pytest.mark.parametrize("layer", [linear_attention, softmax_attention])
def test_heads_beyond_float32_of_float32_prompts_raise(layer):
    X = np.ones((2, 3), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="heads exceed the range of X's dtype"):
            layer(X, np.full((1, 3), 1e300))


def test_softmax_heads_hold_no_array_of_heads_by_features(
    monkeypatch, global_random_seed, traced_peak
):
    # Bounded memory: the heads' softmax weights are summed before they meet
    # the values, so what a block holds is of the scores' size, not K d times
    # the rows (math.md section 2's sum over heads is linear in the weights).
    rng = np.random.default_rng(global_random_seed)
    X, heads = rng.standard_normal((60, 400)), rng.standard_normal((50, 400))
    expected = ref_softmax(X, heads, 0.01)
    monkeypatch.setattr(layers, "_SCORE_BUDGET", 50 * 60 * 8)
    out, peak = traced_peak(lambda: softmax_attention(X, heads, temperature=0.01))
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    # Before: a (1, 50, 8, 400) block of weighted values, 1.3 MB.
    assert peak < 8 * (X.size + 4 * 50 * 60 * 8)


@pytest.mark.parametrize(
    "shape, budget", [((4, 10, 600), None), ((100, 40, 30), 30 * 30)], ids=["L<d", "blocks"]
)
def test_in_context_attention_holds_small_gram_matrices(
    monkeypatch, traced_peak, shape, budget, global_random_seed
):
    # Bounded memory: a prompt shorter than its features takes the L x L Gram
    # matrix, and prompts are taken by blocks within the budget. What is held
    # is the output, of X's size, and the finiteness checks' booleans (an
    # eighth of it). Before, every prompt's d x d Gram matrix and its scaled
    # copy were held at once: a peak of 23 MB for the short prompts (80 times
    # the bound; their L x L matrices take 6 kB), 2.4 MB for the blocks (2.5
    # times X; one prompt a block holds 14 kB).
    if budget is not None:
        monkeypatch.setattr(layers, "_SCORE_BUDGET", budget)
    X = np.random.default_rng(global_random_seed).standard_normal(shape)
    expected = ref_in_context(X, 0.7, 3)
    out, peak = traced_peak(lambda: in_context_attention(X, temperature=0.7, n_clusters=3))
    assert_close(out, expected)
    assert peak < 1.5 * X.nbytes


@pytest.mark.parametrize("name", list(LAYERS))
def test_overflow_raises_instead_of_returning_nan(name):
    layer, _ = LAYERS[name]
    X = np.array([[1e160, 0.0, 1e160], [0.0, -1e160, 1e160]])
    with pytest.raises(FloatingPointError, match="overflowed"):
        layer(X, np.ones((1, 3)), 1.0)


@pytest.mark.parametrize("name", list(LAYERS))
def test_float32_overflow_raises_the_documented_error_alone(name):
    # Float32 products past float32's range (1e20 x 1e20): the
    # FloatingPointError alone, no RuntimeWarning before it (the softmax
    # layer's projections X H^T warned of their overflow first).
    layer, _ = LAYERS[name]
    X = np.array([[1e20, 0.0, 1e20], [0.0, -1e20, 1e20]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(FloatingPointError, match="overflowed"):
            layer(X, np.full((1, 3), 1e20, dtype=np.float32), 1.0)


@pytest.mark.parametrize("name", list(LAYERS))
def test_strided_read_only_batch_matches_contiguous(name, global_random_seed):
    layer, _ = LAYERS[name]
    rng = np.random.default_rng([global_random_seed, 5])
    X = rng.standard_normal((6, 9, 8))[::2, :, ::2]
    X.setflags(write=False)
    heads = rng.standard_normal((2, 4))
    assert_close(layer(X, heads, 0.6), layer(np.ascontiguousarray(X), heads, 0.6))


@pytest.mark.parametrize("shape", [(7, 3), (3, 7)], ids=["prompt", "short-prompt"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_float32_prompts_take_temperatures_beyond_float32(name, shape, global_random_seed):
    # A temperature above float32's largest number was cast to inf with the
    # prompts: the softmax's zero shift times it was NaN, and the linear
    # layers' scaled factors overflowed though their outputs are
    # representable (FloatingPointError). float32 prompts now give the
    # float64 layer's output on the same rounded rows: the hard argmax for
    # the softmax layers, small rows at a large temperature for the linear
    # ones (their outputs near 1e-5).
    layer, _ = LAYERS[name]
    rng = np.random.default_rng([global_random_seed, 6])
    softmax = "softmax" in name
    X = (rng.standard_normal(shape) * (1.0 if softmax else 1e-15)).astype(np.float32)
    heads = rng.standard_normal((2, shape[-1])).astype(np.float32)
    out = layer(X, heads, 1e40)
    expected = layer(X.astype(np.float64), heads.astype(np.float64), 1e40)
    assert out.dtype == np.float32
    assert_close(out, expected, rtol=TOLERANCE[np.float32])
