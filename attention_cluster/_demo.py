"""The demo behind ``make demo`` / ``python -m attention_cluster``.

Fits AttentionClustering, KMeans and GaussianMixture on the paper's mixture
(d=10, K=2, sigma in {0.3, 1}, n=20000) and on the wine data set that ships
with scikit-learn (standardised in a Pipeline, the preprocessing the user
guide recommends for measurements in different units), and prints one
table, then one line explaining each column (``COLUMNS``).
"""

import argparse
import os
import sys
import time

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import load_wine
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ._clustering import AttentionClustering
from .datasets import make_mixture
from .metrics import bayes_error, centroid_distance

# Each column of the table and the line that explains it.
COLUMNS = {
    "fit (s)": "seconds to fit and label the data, after compilation (one run, for scale; "
    "benchmarks/ times methods side by side)",
    "ARI": "adjusted Rand index of the labels against the true classes: 1 is perfect, 0 is chance",
    "distance": "distance of the centres, scaled to unit length, to the true centroids, up to "
    "relabelling and sign (docs/math.md section 5); '-' when they are unknown",
    "Bayes error": "error rate of the best possible rule, which knows the true centroids: "
    "no method can do better",
}


def _centers(model):
    model = model[-1] if hasattr(model, "steps") else model
    centers = getattr(model, "cluster_centers_", None)
    return model.means_ if centers is None else centers


def _datasets(n_samples, random_state):
    for noise in (0.3, 1.0):
        X, y, C = make_mixture(n_samples, 10, 2, noise=noise, random_state=random_state)
        yield f"mixture d=10 K=2 sigma={noise}", X, y, C, bayes_error(C, noise), None
    X, y = load_wine(return_X_y=True)
    yield "wine (standardised)", X, y, None, None, [StandardScaler()]


def run(n_samples=20000, random_state=0, out=print):
    """Fit the three methods on each data set and print the table."""
    # A fit of the mixtures' shape first: it runs the kernels the timed fits
    # run (Numba's from 2^18 numbers, loaded or compiled here; NumPy's forms
    # below), so that their times hold no compile.
    start = time.perf_counter()
    warm = make_mixture(n_samples, 10, 2, random_state=0)[0]
    AttentionClustering(2, random_state=0).fit(warm)
    compile_s = time.perf_counter() - start
    header = f"{'data':36s} {'method':20s} {'fit (s)':>8s} {'ARI':>6s} {'distance':>9s} {'Bayes error':>11s}"
    out(header)
    out("-" * len(header))
    rows = []
    for name, X, y, C, bayes, steps in _datasets(n_samples, random_state):
        K = len(np.unique(y))
        methods = {
            "AttentionClustering": AttentionClustering(K, random_state=random_state),
            "KMeans": KMeans(K, random_state=random_state),
            "GaussianMixture": GaussianMixture(K, random_state=random_state),
        }
        for label, est in methods.items():
            model = make_pipeline(*[clone(s) for s in steps], est) if steps else est
            t0 = time.perf_counter()
            labels = model.fit(X).predict(X)
            seconds = time.perf_counter() - t0
            ari = adjusted_rand_score(y, labels)
            dist = np.nan
            if C is not None:
                centers = _centers(model)
                dist = centroid_distance(
                    centers / np.linalg.norm(centers, axis=1, keepdims=True), C
                )
            rows.append((name, label, seconds, ari, dist, bayes))
            dist_s = "-" if np.isnan(dist) else f"{dist:.2e}"
            bayes_s = "-" if bayes is None else f"{bayes:.4f}"
            out(f"{name:36s} {label:20s} {seconds:8.3f} {ari:6.3f} {dist_s:>9s} {bayes_s:>11s}")
    out("")
    for column, meaning in COLUMNS.items():
        out(f"{column + ':':12s} {meaning}")
    out("")
    out(
        f"A first AttentionClustering fit of the mixtures' shape in this process (with the Numba "
        f"compile or cache load that data of 2^18 numbers or more need): {compile_s:.2f} s, "
        "not counted above."
    )
    return rows


def main(argv=None):
    """``python -m attention_cluster [--n-samples N] [--random-state S]``:
    :func:`run` with these settings; ``--help`` prints the usage, and an
    unknown option exits with status 2 before any fit."""
    parser = argparse.ArgumentParser(
        prog="python -m attention_cluster",
        description="AttentionClustering, KMeans and GaussianMixture side by side on the "
        "paper's mixture and on the wine data set: one table.",
    )
    parser.add_argument(
        "--n-samples",
        type=int,
        default=20000,
        help="rows of each mixture (default: %(default)s; at least 100)",
    )
    parser.add_argument(
        "--random-state", type=int, default=0, help="seed of the data and the fits (default: 0)"
    )
    args = parser.parse_args(argv)
    if args.n_samples < 100:
        parser.error(f"--n-samples must be at least 100, got {args.n_samples}.")
    if not 0 <= args.random_state < 2**32:
        parser.error(f"--random-state must be in 0 .. 2^32 - 1, got {args.random_state}.")
    try:
        run(n_samples=args.n_samples, random_state=args.random_state)
    except BrokenPipeError:
        # The reader closed the pipe (``| head``): Python's own advice, stdout
        # to devnull so that the interpreter's flush at exit does not raise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except MemoryError:
        sys.exit(f"error: --n-samples {args.n_samples} needs more memory than this machine has.")
