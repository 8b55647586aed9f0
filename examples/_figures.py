"""Shared code of the figure scripts ``plot_fig*.py`` and ``plot_appendix_*.py``.

Not a gallery example (sphinx-gallery only runs ``plot_*`` files). It holds
the settings the scripts share, the runs of PSGD
(:func:`attention_cluster.theory.psgd_path`) with population PGD from the
same starts, the statistical floor, and the output conventions, read from
the environment when a script asks (:func:`quick`, :func:`output_dir`),
never when this module is imported:

- ``ATTENTION_CLUSTER_QUICK`` (any non-empty value): quick mode, a few runs
  of a few hundred steps, so that every script runs in seconds;
- ``ATTENTION_CLUSTER_OUTPUT`` (a directory): each script writes its figure
  to ``<dir>/<name>.png`` and its measured numbers, with the claims of the
  paper they check, to ``<dir>/<name>.json``. ``python -m
  examples.make_figures`` sets it and turns the JSON files into
  ``docs/reproduction.md``.

The paper's PSGD settings (its Appendix F) are not available; the ones
below are chosen to match what its text describes and are stated in every
script.
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.utils import check_random_state

from attention_cluster import AttentionClustering, theory
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance, class_means_distance


def quick():
    """Whether ``ATTENTION_CLUSTER_QUICK`` asks for quick mode."""
    return bool(os.environ.get("ATTENTION_CLUSTER_QUICK"))


def output_dir():
    """The directory ``ATTENTION_CLUSTER_OUTPUT`` names, or None."""
    return os.environ.get("ATTENTION_CLUSTER_OUTPUT") or None


# The paper's setting (sections 3.2-3.3): two orthogonal unit centroids in
# dimension 10, a low- and a high-interference noise level.
N_FEATURES = 10
N_CLUSTERS = 2
NOISES = (0.3, 1.0)
# PSGD draws sequences of L tokens with replacement from a finite sample of
# n points. Chosen here, the paper's values being lost: n = 20000 points
# (sample_size(), 2000 in quick mode);
# L = 100, long enough for lambda*(sigma, L, d) to be within 3 % of its
# L -> infinity limit, which the paper uses to choose lambda (section 3.1);
# one sequence per step (plain SGD); a constant step (the paper's curves,
# linear convergence then a plateau, are those of a constant step) of 0.06
# over the curvature scale lambda K E||X||^2 of the risk, with which
# population PGD from the manifold descends linearly over the first ~1e3
# iterations, the time scale of the paper's Figure 1.
SEQUENCE_LENGTH = 100
BATCH_SIZE = 1
LEARNING_RATE = 0.06


def sample_size():
    """n, the points of each run's sample."""
    return 2000 if quick() else 20000


def run_count():
    """Runs of each setting, each on a new sample from a new start."""
    return 3 if quick() else 10


def temperature(
    noise, sequence_length=SEQUENCE_LENGTH, n_clusters=N_CLUSTERS, n_features=N_FEATURES
):
    """lambda: the rule of ``AttentionClustering(temperature="auto")`` with the true sigma.

    :func:`attention_cluster.theory.auto_temperature` without the
    second-moment cap: the unbiased temperature of Prop. 4.1, capped at 0.95
    lambda*(sigma, L, d) (Thm. 3.4 needs lambda <= lambda*; at lambda*
    itself the convergence is no longer linear).
    """
    return theory.auto_temperature(
        noise, sequence_length, n_clusters=n_clusters, n_features=n_features
    )


def step_size(temperature, noise, n_clusters=N_CLUSTERS, n_features=N_FEATURES, learning_rate=None):
    """Constant PSGD step ``learning_rate / (lambda K E||X||^2)``.

    ``lambda K E||X||^2 = lambda K (1 + d sigma^2)`` for unit centroids is the
    curvature scale the estimator normalises its step by.
    """
    learning_rate = LEARNING_RATE if learning_rate is None else learning_rate
    return learning_rate / (temperature * n_clusters * (1.0 + n_features * noise**2))


def random_heads(n_heads, n_features, random_state):
    """Heads drawn uniformly on the sphere, one per row."""
    rng = check_random_state(random_state)
    H = rng.standard_normal((n_heads, n_features))
    return H / np.linalg.norm(H, axis=1, keepdims=True)


def record_points(n_iter, n_points=200):
    """Iterations at which the heads are recorded: 0 and a regular grid."""
    return np.unique(np.linspace(0, n_iter, n_points + 1).astype(int))


def distances(path, centroids):
    """``centroid_distance`` of every recorded set of heads."""
    return np.array([centroid_distance(heads, centroids) for heads in path])


def population_path(
    heads0,
    centroids,
    noise,
    temperature,
    step_size,
    record,
    *,
    reg_strength=0.0,
    sequence_length=SEQUENCE_LENGTH,
    tol=1e-9,
):
    """Population PGD (exact risk, no sampling) with the step of PSGD.

    :func:`attention_cluster.theory.population_pgd` from the same start;
    returns the distance to the centroids at the iterations of ``record``
    (held at its last value once the Riemannian gradient is below tol).
    """
    res = theory.population_pgd(
        heads0,
        centroids,
        noise,
        temperature,
        sequence_length,
        reg_strength=reg_strength,
        step_size=step_size,
        max_iter=int(record[-1]),
        tol=tol,
    )
    d = res.distance
    return d[np.minimum(record, len(d) - 1)], res


def exact_solution(X, heads0, centroids, lam, regularization, reg_strength):
    """Distance reached by the exact full-batch solver from the same start.

    ``AttentionClustering(solver="full")`` minimises, to tolerance, the
    expected risk of the sampled sequences that PSGD estimates (``math.md``
    section 3), with the same temperature, regulariser and sequence length:
    the gap between it and PSGD's plateau is sampling noise alone. Without
    the EM refinement (``refine=None``), which would change the objective.
    """
    model = AttentionClustering(
        len(heads0),
        solver="full",
        refine=None,
        init=heads0,
        temperature=lam,
        sequence_length=SEQUENCE_LENGTH,
        regularization=regularization,
        reg_strength=reg_strength if regularization else 0.0,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X)
    return centroid_distance(model.cluster_centers_, centroids)


def experiment(
    noise,
    *,
    n_iter,
    record=None,
    init="random",
    regularization=None,
    reg_strength=0.0,
    gradient="riemannian",
    n_features=N_FEATURES,
    n_clusters=N_CLUSTERS,
    n_heads=None,
    centroids="orthogonal",
    n_runs=None,
    population_runs=None,
    seed=0,
    desc=None,
):
    """Runs of PSGD, each on a new sample from a new start, with their counterparts.

    Run ``r`` draws ``n`` points of the mixture (seed ``seed + r``), a start
    (on the manifold M with alignments uniform in (-1, 1), or uniform on the
    sphere) and runs :func:`attention_cluster.theory.psgd_path`; the first
    ``population_runs`` runs also run population PGD from the same start
    with the same step (pairwise or no regulariser only: the product
    regulariser has no closed form here). Lambda and the step follow :func:`temperature` and
    :func:`step_size` for the mixture's K and d.

    Returns
    -------
    dict
        ``temperature``, ``step``, ``record``, ``psgd`` (runs x records
        distances), ``heads`` (final heads of each run), ``centroids``,
        ``floor`` (per run), ``full`` (the exact solver's distance, per
        run), ``pgd`` (population runs x records) and ``pgd_heads``.
    """
    n_runs = run_count() if n_runs is None else n_runs
    if population_runs is None:
        population_runs = 1 if quick() else n_runs
    population_runs = min(population_runs, n_runs)
    n_heads = n_clusters if n_heads is None else n_heads
    record = record_points(n_iter) if record is None else record
    lam = temperature(noise, SEQUENCE_LENGTH, n_clusters, n_features)
    gamma = step_size(lam, noise, n_clusters, n_features)
    if regularization == "product":
        population_runs = 0
    out = dict(
        temperature=lam,
        step=gamma,
        record=record,
        psgd=[],
        heads=[],
        centroids=[],
        floor=[],
        pgd=[],
        pgd_heads=[],
        full=[],
    )
    for run in progress(range(n_runs), desc=desc or f"sigma={noise}", leave=False):
        X, y, C = make_mixture(
            sample_size(),
            n_features,
            n_clusters,
            noise=noise,
            centroids=centroids,
            random_state=seed + run,
        )
        rng = np.random.RandomState(10_000 + seed + run)
        if init == "manifold":
            H0 = theory.manifold_heads(C, rng.uniform(-1.0, 1.0, n_clusters), random_state=rng)
        else:
            H0 = random_heads(n_heads, n_features, rng)
        path = theory.psgd_path(
            X,
            H0,
            temperature=lam,
            step_size=gamma,
            record=record,
            sequence_length=SEQUENCE_LENGTH,
            batch_size=BATCH_SIZE,
            regularization=regularization,
            reg_strength=reg_strength,
            gradient=gradient,
            n_clusters=n_clusters,
            random_state=rng,
        )
        out["psgd"].append(distances(path, C))
        out["heads"].append(path[-1])
        out["centroids"].append(C)
        out["floor"].append(class_means_distance(X, y, C))
        out["full"].append(exact_solution(X, H0, C, lam, regularization, reg_strength))
        if run < population_runs:
            # population_pgd's factor is lambda * n_heads / L: keep lambda K / L.
            dist, res = population_path(
                H0,
                C,
                noise,
                lam * n_clusters / n_heads,
                gamma,
                record,
                reg_strength=reg_strength if regularization else 0.0,
            )
            out["pgd"].append(dist)
            out["pgd_heads"].append(res.heads)
    return {k: np.array(v) for k, v in out.items()} | {"temperature": lam, "step": gamma}


def layer_monte_carlo(layer, X, labels, centroids):
    """Monte Carlo risk, bias and conditional variance of an attention layer.

    ``X`` holds prompts (n, L, d), ``labels`` their tokens' components and
    ``centroids`` the centroids, shared (K, d) or one set per prompt
    (n, K, d). ``layer(X)`` returns the outputs T. With ``m = mu*_{Z}`` the
    centroid of each token:

    - ``risk``: ``E||X_l - T_l||^2`` (the paper's risk, section 2);
    - ``scale``: b in ``E[T_l | mu*, Z_l] = b m`` (Props. 4.1, 5.1; by
      symmetry the mean has no other component), estimated as the mean of
      ``<T_l, m>``; the layer is unbiased when b = 1;
    - ``conditional_variance``: ``E||T_l - b m||^2`` (Props. 4.2, 5.2).

    Each comes with its standard error over prompts (tokens of one prompt
    are dependent, prompts are independent).
    """
    T = layer(X)
    m = (
        centroids[labels]
        if centroids.ndim == 2
        else np.take_along_axis(centroids, labels[:, :, None], axis=1)
    )
    risk = np.mean(np.sum((X - T) ** 2, axis=2), axis=1)
    inner = np.mean(np.sum(T * m, axis=2), axis=1)
    b = float(np.mean(inner))
    var = np.mean(np.sum((T - b * m) ** 2, axis=2), axis=1)
    n = X.shape[0]

    def est(v):
        return {"mean": float(np.mean(v)), "se": float(np.std(v, ddof=1) / np.sqrt(n))}

    return {"risk": est(risk), "scale": est(inner), "conditional_variance": est(var), "outputs": T}


def pca_comparison(ax, X, T, labels, centroids, title):
    """Inputs and outputs in the plane of the inputs' two principal axes.

    The PCA is fitted on the input tokens only (the paper's Figures 3-4)
    and projects inputs, outputs and centroids.
    """
    from sklearn.decomposition import PCA

    pca = PCA(n_components=2).fit(X)
    Zx, Zt, Zc = pca.transform(X), pca.transform(T), pca.transform(centroids)
    for c, color in zip(range(len(centroids)), ("tab:blue", "tab:red", "tab:green")):
        ax.scatter(*Zx[labels == c].T, s=6, color=color, alpha=0.25, label=f"inputs, cluster {c}")
        ax.scatter(
            *Zt[labels == c].T,
            s=6,
            color=color,
            marker="x",
            alpha=0.9,
            label=f"outputs, cluster {c}",
        )
    ax.scatter(
        *Zc.T, s=150, facecolors="none", edgecolors="k", linewidths=1.5, label="centroids", zorder=3
    )
    ax.set_xlabel("PC 1 (of the inputs)")
    ax.set_ylabel("PC 2 (of the inputs)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(title)
    ax.legend(fontsize="x-small", loc="best")
    return pca


def summary(values):
    """Median, 2.5 % and 97.5 % percentiles, min and max of a set of runs."""
    v = np.asarray(values, dtype=np.float64)
    return {
        "median": float(np.median(v)),
        "p2.5": float(np.percentile(v, 2.5)),
        "p97.5": float(np.percentile(v, 97.5)),
        "min": float(np.min(v)),
        "max": float(np.max(v)),
        "n": int(v.size),
    }


def fmt(x):
    """A number in 3 significant digits, scientific below 1e-2."""
    x = float(x)
    if x == 0 or not np.isfinite(x):
        return f"{x:g}"
    return f"{x:.2e}" if abs(x) < 1e-2 or abs(x) >= 1e4 else f"{x:.3g}"


def fmt_summary(s):
    """``median [min, max] (n runs)`` of a :func:`summary`."""
    if s["n"] == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} [{fmt(s['min'])}, {fmt(s['max'])}] ({s['n']} runs)"


def plateau(curves, fraction=0.2):
    """Per run, the median distance over the last ``fraction`` of the records."""
    curves = np.asarray(curves)
    tail = max(1, int(round(fraction * curves.shape[1])))
    return np.median(curves[:, -tail:], axis=1)


def linear_phase(iterations, curve, level):
    """Fit ``log10 D = a + b t`` over the iterations before ``curve`` reaches ``level``.

    Returns ``(t_hit, decades_per_1000, r2)``: the first recorded iteration
    at which the curve is at or below ``level``, the slope and the R^2 of
    the fit, a straight line on the log scale being linear convergence.
    """
    iterations = np.asarray(iterations, dtype=np.float64)
    curve = np.asarray(curve, dtype=np.float64)
    hit = np.flatnonzero(curve <= level)
    end = int(hit[0]) if hit.size else len(curve) - 1
    end = max(end, 2)
    t, y = iterations[: end + 1], np.log10(np.maximum(curve[: end + 1], 1e-300))
    slope, intercept = np.polyfit(t, y, 1)
    resid = y - (intercept + slope * t)
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum(resid**2) / total if total > 0 else 1.0
    return float(iterations[end]), float(-1000.0 * slope), float(r2)


def within_factor(value, target, factor=3.0):
    """Whether ``value`` is within a factor ``factor`` of ``target``."""
    return bool(target / factor <= value <= target * factor)


def claim(key, figure, statement, paper, measured, agrees, criterion, explanation=""):
    """One row of the reproduction table.

    ``statement`` says what is checked, ``paper`` what the paper states,
    ``measured`` what this run measured (text), ``agrees`` the verdict
    computed from the numbers by ``criterion`` (text), and ``explanation``
    why the numbers differ, or what lies behind them.
    """
    return {
        "key": key,
        "figure": figure,
        "statement": statement,
        "paper": paper,
        "measured": measured,
        "verdict": "agrees" if agrees else "differs",
        "criterion": criterion,
        "explanation": explanation,
    }


def curve_claims(key, figure, name, r, paper_level, paper_phase, max_phase, plateau_note=""):
    """The plateau and linear-phase claims of a set of PSGD curves.

    ``r`` is an :func:`experiment`; it receives ``plateau``,
    ``floor_summary``, ``t_hit``, ``rate``, ``r2`` and ``pgd_final``. The
    plateau agrees when its median is within a factor 3 of
    ``paper_level``; the descent is linear when the median curve, up to 3x
    the plateau, is a straight line in log scale (R^2 >= 0.9) reached within
    ``max_phase`` iterations.
    """
    record = r["record"]
    plat = summary(plateau(r["psgd"]))
    t_hit, rate, r2 = linear_phase(record, np.median(r["psgd"], axis=0), 3 * plat["median"])
    r.update(
        plateau=plat,
        floor_summary=summary(r["floor"]),
        t_hit=t_hit,
        rate=rate,
        r2=r2,
        pgd_final=summary(r["pgd"][:, -1]) if len(r["pgd"]) else None,
    )
    agrees = within_factor(plat["median"], paper_level)
    return [
        claim(
            f"{key}-plateau",
            figure,
            f"PSGD plateau, {name}",
            f"plateau near {paper_level:.0e}",
            fmt_summary(plat),
            agrees,
            "median within a factor 3 of the paper's value",
            (
                ""
                if agrees
                else f"{paper_level / plat['median']:.2g}x {'below' if plat['median'] < paper_level else 'above'} "
                "the paper's level. The plateau of a constant-step PSGD scales with the step over the "
                "number of tokens per step; the paper's step, batch and L are lost, and ours were set "
                "by the time scale of the descent, not by the plateau. "
            )
            + f"Median over the last 20 % of {int(record[-1])} iterations; floor of the samples "
            f"{fmt(r['floor_summary']['median'])}. " + plateau_note,
        ),
        claim(
            f"{key}-linear",
            figure,
            f"PSGD converges linearly at first, {name}",
            paper_phase,
            f"log-linear until iteration {t_hit:.0f} ({rate:.2f} decades per 1000 iterations, R^2 = {r2:.3f})",
            r2 >= 0.9 and t_hit <= max_phase,
            f"R^2 >= 0.9 for a straight line in log scale up to 3x the plateau, reached within {max_phase} "
            "iterations",
            "The time scale is that of the chosen step size."
            + (
                ""
                if r2 >= 0.9
                else " The median curve bends: a fast descent, then a slower approach "
                "to the plateau, so one straight line fits it poorly."
            ),
        ),
    ]


def progress(iterable, **kwargs):
    """tqdm progress bar on stderr, off in quick mode."""
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=quick(), file=sys.stderr, **kwargs)


def band(ax, x, curves, label, color, linestyle="-"):
    """Median curve and 95 % percentile band (2.5 % to 97.5 %) over runs."""
    curves = np.asarray(curves)
    lo, med, hi = np.percentile(curves, [2.5, 50, 97.5], axis=0)
    ax.plot(x, med, color=color, linestyle=linestyle, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)


def hline(ax, value, label, color, linestyle=":"):
    ax.axhline(value, color=color, linestyle=linestyle, linewidth=1.2, label=label)


def draw_runs(
    ax,
    r,
    label,
    color,
    linestyle="-",
    population="band",
    population_label="population PGD, same step",
    floor_label="statistical floor (class means)",
    floor_color="k",
):
    """PSGD band of an :func:`experiment`, its population PGD and its floor.

    ``population`` is ``"band"`` (median and band, in orange), ``"median"``
    (a dashed median in the run's colour) or None.
    """
    record = r["record"]
    band(ax, record, r["psgd"], label, color, linestyle)
    if population == "band" and len(r["pgd"]):
        band(ax, record, np.maximum(r["pgd"], 1e-16), population_label, "tab:orange", "--")
    elif population == "median" and len(r["pgd"]):
        ax.plot(
            record,
            np.maximum(np.median(r["pgd"], axis=0), 1e-16),
            "--",
            color=color,
            alpha=0.7,
            label=population_label,
        )
    if floor_color is not None:
        hline(ax, np.median(r["floor"]), floor_label, floor_color)
        if len(r.get("full", ())):
            hline(ax, np.median(r["full"]), "exact full-batch solver", "tab:green", "-.")


def distance_panels(title, n_panels=len(NOISES), width=10.0):  # noqa: B008 (a module constant)
    """A row of panels sharing a log-scale distance axis."""
    fig, axes = plt.subplots(
        1, n_panels, figsize=(width, 4), sharey=True, layout="constrained", squeeze=False
    )
    fig.suptitle(title)
    return fig, axes[0]


def finish_distance_axes(axes, ylim=(1e-9, 10), legend_size="small", legend_loc="lower left"):
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylim(*ylim)
        ax.set_xlabel("iteration")
    axes[0].set_ylabel("distance to the centroids")
    axes[0].legend(loc=legend_loc, fontsize=legend_size)


def psgd_settings(**extra):
    """The shared PSGD settings, plus the script's own, for its results file."""
    return (
        dict(
            n_samples=sample_size(),
            n_features=N_FEATURES,
            n_clusters=N_CLUSTERS,
            sequence_length=SEQUENCE_LENGTH,
            batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE,
            n_runs=run_count(),
        )
        | extra
    )


class Timer:
    """Wall time since creation, for the results file."""

    def __init__(self):
        self.start = time.perf_counter()

    def __call__(self):
        return time.perf_counter() - self.start


def finish(name, fig, results, timer):
    """Save ``<name>.png`` and ``<name>.json`` under ATTENTION_CLUSTER_OUTPUT.

    Without it (a plain run, or the docs build) nothing is written. The
    claims are also printed, so a plain run shows its verdicts.
    """
    results = dict(results)
    results["name"] = name
    results["quick"] = quick()
    results["seconds"] = round(timer(), 1)
    for c in results.get("claims", []):
        print(f"[{c['verdict']}] {c['statement']}: {c['measured']} (paper: {c['paper']})")
    output = output_dir()
    if output:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(out / f"{name}.png", dpi=90)
        (out / f"{name}.json").write_text(
            json.dumps(_plain(results), indent=1, sort_keys=True) + "\n"
        )
    if not output and "MPLBACKEND" not in os.environ:
        plt.show()


def _plain(obj):
    """Numbers and arrays as JSON-friendly Python objects."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else str(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
