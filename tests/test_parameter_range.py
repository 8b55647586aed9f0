"""Real parameters at float64's ends: fits without a warning, as their limits.

A temperature or a regularisation strength up to float64's largest number
flooded the exact solver with NumPy's RuntimeWarnings (from lambda ~ 1e80
and rho ~ 1e200 on these rows), its labels those of a solver that never
moved. The exact objective is now scaled (``math.md`` section 3, "Large
temperatures and strengths"), and such values give the labels of a merely
large one: the limit of the minimisers. Where a computation's result itself
leaves float64 (PSGD's loss, a linear layer's output), a clear error.
"""

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering, InContextQuantizer, SelfAttentionDynamics
from attention_cluster._objective import exact_objective, objective_exponent
from attention_cluster._passes import DenseRows
from attention_cluster._settings import auto_reg_strength
from attention_cluster.datasets import make_mixture
from attention_cluster.layers import in_context_softmax_attention

LARGEST = float(np.finfo(np.float64).max)
SMALLEST = 5e-324  # the smallest subnormal number
X = make_mixture(300, 5, 3, noise=0.2, random_state=0)[0]


def _quiet(fit):
    """``fit()`` with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fit()


@pytest.mark.parametrize("refine", ["em", None], ids=["em", "no-refine"])
@pytest.mark.parametrize(
    "name, moderate, extremes",
    [
        ("temperature", 1e10, [1e80, 1e100, 1e155, 1e300, LARGEST]),
        ("reg_strength", 1e10, [1e155, 1e200, 1e300, LARGEST]),
        ("temperature", 1e-20, [1e-300, SMALLEST]),
        ("reg_strength", 0.0, [1e-300, SMALLEST]),
    ],
    ids=["large-temperature", "large-strength", "tiny-temperature", "tiny-strength"],
)
def test_extreme_values_fit_quietly_with_the_labels_of_their_limit(
    refine, name, moderate, extremes
):
    # lambda -> infinity: the minimisers of the layer's output energy (not
    # the centroids beyond lambda*); rho -> infinity: the regulariser's;
    # both reached at 1e10 already, to the labels.
    model = AttentionClustering(3, solver="full", refine=refine, random_state=0)
    reference = _quiet(lambda: clone(model).set_params(**{name: moderate}).fit(X)).labels_
    for value in extremes:
        labels = _quiet(lambda v=value: clone(model).set_params(**{name: v}).fit(X)).labels_
        assert adjusted_rand_score(reference, labels) == 1.0, value


def test_the_loss_curve_is_the_objective_infinite_only_beyond_float64():
    moderate = _quiet(lambda: AttentionClustering(3, temperature=1e100, refine=None).fit(X))
    assert np.all(np.isfinite(moderate.loss_curve_))
    # R ~ c^2 E||T1||^2 with c = lambda K / L = 6e98.
    assert 1e190 < moderate.loss_curve_[-1] < 1e210
    huge = _quiet(lambda: AttentionClustering(3, temperature=1e300, refine=None).fit(X))
    assert np.all(huge.loss_curve_ == np.inf)


@pytest.mark.parametrize(
    "temperature, reg_strength", [(100.0, 10.0), (1e-3, 1e6), (50.0, 0.0), (1e60, 1e100)]
)
def test_the_scaled_objective_is_the_objective_divided_by_a_power_of_two(temperature, reg_strength):
    # Division by 4^e is exact: the scaled value and gradient times 4^e are
    # the unscaled ones to the last bit where those are finite.
    rows = DenseRows(X)
    U = np.linalg.qr(np.random.default_rng(0).standard_normal((5, 3)))[0]
    e = objective_exponent(temperature, 3, 50, reg_strength)
    assert e > 0
    args = (rows, rows.second_moment(), U, temperature, 50, "pairwise", reg_strength)
    value, grad = exact_objective(*args)
    scaled_value, scaled_grad = exact_objective(*args, e)
    assert np.ldexp(scaled_value, 2 * e) == value
    np.testing.assert_array_equal(np.ldexp(scaled_grad, 2 * e), grad)


@pytest.mark.parametrize(
    "temperature, reg_strength, exponent",
    [
        (50 / 3, 1.0, 0),  # c = 1 and rho = 1: every default
        (0.5, 0.0, 0),
        (1e-300, 0.25, 0),
        (20.0, 0.0, None),
        (0.5, 1e300, None),
        (LARGEST, LARGEST, None),
    ],
)
def test_the_objective_scale_is_one_in_range_and_bounds_every_coefficient(
    temperature, reg_strength, exponent
):
    e = objective_exponent(temperature, 3, 50, reg_strength)
    if exponent is not None:
        assert e == exponent
        return
    # gamma = 2^e is above c = lambda K / L and sqrt(rho), within a factor 4
    # of the larger (in logarithms: lambda K at float64's top overflows).
    log_c = math.log2(temperature) + math.log2(3 / 50)
    log_root_rho = math.log2(reg_strength) / 2 if reg_strength > 0 else -math.inf
    assert log_c < e and log_root_rho < e
    assert e <= max(log_c, log_root_rho) + 2


def test_the_default_strength_at_a_large_temperature_is_its_limit_zero():
    # f(m_s) - f(sigma^2) is negative once lambda K m > 4/3: rho = 0 there,
    # up to float64's largest temperature (the expanded form overflowed to
    # inf - inf, NaN, with NumPy's warnings).
    for temperature in (1e10, 1e155, 1e300, LARGEST):
        for regularization in ("pairwise", "product"):
            rho = _quiet(
                lambda t=temperature, r=regularization: auto_reg_strength(
                    np.float64(0.2), t, 3, r, np.float64(0.3)
                )
            )
            assert rho == 0.0


@pytest.mark.parametrize("name", ["temperature", "reg_strength", "learning_rate"])
def test_psgd_refuses_a_loss_beyond_float64_clearly(name):
    # PSGD's loss is no scaled objective: beyond float64 it stops with its
    # FloatingPointError, and no RuntimeWarning comes first.
    model = AttentionClustering(3, solver="psgd", random_state=0, **{name: 1e300})
    with pytest.raises(FloatingPointError, match="PSGD overflowed the floating-point range"):
        _quiet(lambda: model.fit(X))


def test_a_softmax_layer_at_float64s_largest_temperature_is_the_hard_argmax():
    # The scores are shifted before lambda multiplies them: beyond float64
    # the weights are their limit, 0 but at the maximum (ties shared).
    outputs = [
        _quiet(
            lambda t=t: (
                InContextQuantizer(3, temperature=t, attention="softmax").fit(X).transform(X)
            )
        )
        for t in (1e10, 1e300, LARGEST)
    ]
    tokens = np.asarray(X)
    hard = tokens[np.argmax(tokens @ tokens.T, axis=1)]
    for out in outputs:
        np.testing.assert_allclose(out, hard, rtol=1e-12, atol=1e-12)


def test_a_linear_layer_whose_output_leaves_float64_raises():
    model = InContextQuantizer(3, temperature=LARGEST).fit(X)
    with pytest.raises(FloatingPointError, match="overflowed the floating-point range"):
        _quiet(lambda: model.transform(X))


@pytest.mark.parametrize("model", ["sa", "usa", "unnormalized"])
@pytest.mark.parametrize("name", ["beta", "step_size", "cluster_tol"])
@pytest.mark.parametrize("value", [SMALLEST, 1e-300, 1e300, 1e308, LARGEST])
def test_the_dynamics_at_float64s_ends_warn_no_rounding(model, name, value):
    # The dynamics may report no plateau (a ConvergenceWarning: at beta ->
    # infinity a token on the sphere attends to itself only, and stays) or
    # a clear FloatingPointError where its logits or tokens leave float64
    # (the unnormalised models' exp(beta <x, y>) and e^t); never NumPy's
    # RuntimeWarnings (the unnormalised model's tokens near float64's
    # largest numbers overflowed the grouping's span).
    params = {"model": model, "step_size": 0.5 if model != "unnormalized" else 0.1}
    params.update({"beta": 0.5, name: value, "max_iter": 20, "random_state": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)  # the ConvergenceWarning
        try:
            SelfAttentionDynamics(**params).fit(X)
        except FloatingPointError as error:
            assert "overflowed the floating-point range" in str(error)


def test_a_softmax_layer_s_overflow_does_not_advise_a_lower_temperature():
    # Tokens whose inner products pass float64 overflow before a temperature
    # multiplies them: "rescale X or lower the temperature" sent the caller to
    # a temperature of 1e-300, which overflowed the same.
    tokens = X[:50] * 1e160
    for call in (
        lambda: InContextQuantizer(attention="softmax", temperature=1e-300).fit_transform(tokens),
        lambda: in_context_softmax_attention(tokens, temperature=1e-300),
    ):
        with pytest.raises(FloatingPointError, match="rescale X") as error:
            _quiet(call)
        assert "lower the temperature" not in str(error.value)
