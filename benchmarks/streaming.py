"""One pass of partial_fit over a stream: which update, and how close to the floor.

The paper's mixture (d=10, K=2, sigma in {0.3, 1}), a stream of 1e6 rows
in batches of 10 000, one pass. Candidates for the update after the first
batch (which every candidate fits with ``AttentionClustering().fit``):

- ``linearised EM``: the update ``partial_fit`` makes
  (``_mixture.LinearisedEM``): each batch's E-step statistics at the
  parameters of its time, averaged, with their Jacobian in the parameters,
  and the M step of the whole stream's linearised statistics;
- ``online EM``: Cappe and Moulines' stochastic approximation
  (``_mixture.OnlineEM`` at its defaults: gamma_n = min(1, 16 / n)^0.6,
  statistics averaged), partial_fit's update above 512 parameters;
- ``Cappe-Moulines``: the same without the gain, gamma_n = n^-0.6;
- ``running mean``: gamma_n = 1 / n, no averaging (each batch's E step
  statistics at the parameters of its time, averaged: linearised EM
  without the Jacobian);
- ``PSGD``: 200 PSGD steps on each batch, started at the previous heads
  (``AttentionClustering(solver="psgd", init=heads, max_iter=200)``), the
  paper's estimator fed batch by batch.

Each is compared with the class-means floor of the whole stream (true-label
class means normalised to the sphere) and with ``fit`` on the whole stream
in memory (``solver="full"``: the exact solver then EM on all rows, the
maximum-likelihood centroids). Times are the pass's wall time after Numba's
compile. Writes benchmarks/results/streaming.json and rewrites
docs/scaling_out.md from it and the last out-of-core runs.

    python benchmarks/streaming.py [--quick]
"""

import os
import warnings
from pathlib import Path

import numpy as np
from _common import RESULTS, ROOT, mixture_limits, quick_cli, run_conditions, save, timed
from sklearn.exceptions import ConvergenceWarning

from attention_cluster import AttentionClustering
from attention_cluster._mixture import LinearisedEM, OnlineEM
from attention_cluster._passes import DenseRows
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance, class_means_distance

BATCH = 10_000
VARIANTS = {
    "linearised EM": {"update": LinearisedEM},
    "online EM": {},
    "Cappe-Moulines": {"gain": 1.0},
    "running mean": {"alpha": 1.0, "gain": 1.0},
}


def online(first, batches, update=OnlineEM, **kwargs):
    """An update from the first batch's fit, over every batch, as partial_fit runs it."""
    stream = update(first.cluster_centers_.T, first.weights_, first.noise_scale_, **kwargs)
    for batch in batches:
        p = stream.update(DenseRows(batch, scale=first.scale_, n_threads=1))
    return p.U.T


def psgd(first, batches, seed):
    heads = first.cluster_centers_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for batch in batches[1:]:
            heads = (
                AttentionClustering(solver="psgd", init=heads, max_iter=200, random_state=seed)
                .fit(batch)
                .cluster_centers_
            )
    return heads


def one_stream(n, noise, seed):
    X, y, C = make_mixture(n, 10, 2, noise=noise, random_state=seed)
    batches = [X[i : i + BATCH] for i in range(0, n, BATCH)]
    row = {"noise": noise, "n": n, "seed": seed, "floor": class_means_distance(X, y, C)}
    seconds, model = timed(lambda: AttentionClustering(2, random_state=seed).fit(X[:BATCH]))
    for name, kwargs in VARIANTS.items():
        seconds, heads = timed(lambda kw=kwargs: online(model, batches, **kw))
        row[name] = centroid_distance(heads, C)
        row[name + " s"] = seconds
    seconds, heads = timed(lambda: psgd(model, batches, seed))
    row["PSGD"], row["PSGD s"] = centroid_distance(heads, C), seconds
    # partial_fit itself, timed over the whole pass (first call included).
    stream = AttentionClustering(2, random_state=seed)
    seconds, _ = timed(lambda: [stream.partial_fit(b) for b in batches])
    row["partial_fit"], row["partial_fit s"] = (
        centroid_distance(stream.cluster_centers_, C),
        seconds,
    )
    seconds, full = timed(lambda: AttentionClustering(2, solver="full", random_state=seed).fit(X))
    row["fit in memory"], row["fit in memory s"] = (
        centroid_distance(full.cluster_centers_, C),
        seconds,
    )
    return row


def main(quick=False, out=None):
    n = 100_000 if quick else 1_000_000
    seeds = 1 if quick else 30
    load_before = os.getloadavg()
    # Numba's compile, outside the timings: a fit in memory of at least
    # 2^18 numbers runs the compiled kernels (smaller data, their NumPy forms).
    one_stream(4 * BATCH, 0.3, 0)
    rows = []
    for noise in (0.3, 1.0):
        for seed in range(seeds):
            row = one_stream(n, noise, seed)
            rows.append(row)
            print(
                f"sigma={noise} seed={seed}: floor {row['floor']:.2e} | "
                + "  ".join(
                    f"{k} {row[k] / row['floor']:.2f}x"
                    for k in (*VARIANTS, "PSGD", "partial_fit", "fit in memory")
                ),
                flush=True,
            )
    # The expected distance of an efficient estimator over the floor's
    # (math.md section 7, "The information limit"): what no method that
    # does not see the labels beats in expectation.
    limits = {
        str(noise): float(np.divide(*mixture_limits(n, 10, 2, noise, n_draws=1_000_000)))
        for noise in (0.3, 1.0)
    }
    payload = {
        "quick": quick,
        "n": n,
        "batch": BATCH,
        "rows": rows,
        "information_limit": limits,
        **run_conditions(load_before),
    }
    save("streaming", payload, **({"directory": out} if out else {}))
    from _scaling_page import write_page

    write_page(Path(out) if out else RESULTS, Path(out) if out else ROOT / "docs")
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main)
