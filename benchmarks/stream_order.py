"""partial_fit on a stream whose batches come in the order of the clusters.

A first batch of 300 rows drawn from the whole stream, then the other rows
in batches of 100 or 1000, either shuffled or sorted by cluster (a stream
ordered by class or by time), one pass. ``AttentionClustering.partial_fit``
against ``MiniBatchKMeans.partial_fit`` (its per-centre counts keep the
clusters a batch lacks) on the same batches: ARI of the final model on the
whole stream and distance to the centroids (math.md section 5). Mixtures of
``datasets.make_mixture`` from well separated to overlapping. Accuracy
only, no timings. Writes benchmarks/results/stream_order.json and rewrites
docs/scaling_out.md from it and the other streaming results.

    python benchmarks/stream_order.py [--quick]
"""

import os
from pathlib import Path

import numpy as np
from _common import RESULTS, ROOT, quick_cli, run_conditions, save
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance

FIRST = 300
BATCHES = (100, 1000)
# (n, d, K, sigma): separated, separated with more clusters, wide, overlapping.
MIXTURES = ((3000, 10, 3, 0.3), (6000, 10, 5, 0.3), (6000, 50, 5, 0.5), (20_000, 10, 3, 1.0))


def one_pass(model, X, first, rest, batch):
    model.partial_fit(X[first])
    for i in range(0, len(rest), batch):
        model.partial_fit(X[rest[i : i + batch]])
    return model


def one_mixture(n, d, K, noise, seed):
    X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    first, rest = order[:FIRST], order[FIRST:]
    orders = {"shuffled": rest, "sorted": rest[np.argsort(y[rest], kind="stable")]}
    rows = []
    for batch in BATCHES:
        for name, rows_in_order in orders.items():
            row = {"n": n, "d": d, "K": K, "noise": noise, "seed": seed}
            row.update(batch=batch, order=name)
            ours = one_pass(
                AttentionClustering(K, random_state=seed), X, first, rows_in_order, batch
            )
            row["update"] = type(ours._stream).__name__
            theirs = one_pass(
                MiniBatchKMeans(K, n_init=1, random_state=seed), X, first, rows_in_order, batch
            )
            for key, model in (("partial_fit", ours), ("MiniBatchKMeans", theirs)):
                row[key + " ARI"] = adjusted_rand_score(y, model.predict(X))
                row[key + " distance"] = centroid_distance(model.cluster_centers_, C)
            rows.append(row)
    return rows


def main(quick=False, out=None):
    seeds = 1 if quick else 5
    load_before = os.getloadavg()
    rows = []
    for n, d, K, noise in MIXTURES:
        for seed in range(seeds):
            rows += one_mixture(n, d, K, noise, seed)
            print(f"n={n} d={d} K={K} sigma={noise} seed={seed}", flush=True)
    payload = {
        "quick": quick,
        "first": FIRST,
        "rows": rows,
        **run_conditions(load_before),
    }
    save("stream_order", payload, **({"directory": out} if out else {}))
    from _scaling_page import write_page

    write_page(Path(out) if out else RESULTS, Path(out) if out else ROOT / "docs")
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main)
