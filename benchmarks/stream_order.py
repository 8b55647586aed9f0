"""partial_fit on a stream whose batches come in the order of the clusters.

A first batch of 300 rows drawn from the whole stream, then the other rows
in batches of 50, 100 or 1000, either shuffled or sorted by cluster (a stream
ordered by class or by time), one pass. ``AttentionClustering.partial_fit``
against ``MiniBatchKMeans.partial_fit`` (its per-centre counts keep the
clusters a batch lacks) on the same batches: ARI of the final model on the
whole stream and distance to the centroids (math.md section 5). Mixtures of
``datasets.make_mixture`` from well separated to overlapping, one with
uneven sample weights and one of eight clusters in batches as small as 50.
Online EM's test of a batch (math.md section 7, "A batch that is not a
sample of the stream") is measured by the batches it refuses and the
streams it takes for ones in the clusters' order, against the same stream
with the test off (``significance=0``: every batch taken for a sample, the
recursion before the test), and its two settings, ``significance`` and
``min_effect``, by a sweep; streams from a small first batch (whose
first fit's heads move while they settle) show whether shuffled streams are
taken for ordered ones. Accuracy only, no timings. Writes
benchmarks/results/stream_order.json and rewrites docs/scaling_out.md from
it and the other streaming results.

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
BATCHES = (50, 100, 1000)
# (n, d, K, sigma, weights): separated, separated with more clusters, wide,
# overlapping; separated with lognormal(0, 1.5) sample weights; many
# clusters in small batches.
MIXTURES = (
    (3000, 10, 3, 0.3, False),
    (6000, 10, 5, 0.3, False),
    (6000, 50, 5, 0.5, False),
    (20_000, 10, 3, 1.0, False),
    (6000, 10, 3, 0.3, True),
    (6000, 10, 8, 0.3, False),
)
# The sweep of the test's settings, on batches of 100 of three mixtures.
SIGNIFICANCES = (0.001, 0.01, 0.05)
MIN_EFFECTS = (0.03, 0.1, 0.3)
SWEPT = ((3000, 10, 3, 0.3, False), (6000, 10, 5, 0.3, False), (6000, 50, 5, 0.5, False))


# Streams from a small first batch, where the first fit's heads are often
# misplaced and the parameters move while they settle (shares off the
# stream's in shuffled batches): (mixture, first batch, batch).
SMALL_FIRST = (
    ((6000, 10, 8, 0.3, False), 50, 50),
    ((3000, 10, 3, 0.5, True), 50, 50),
    ((6000, 10, 3, 0.7, True), 100, 100),
    ((6000, 50, 5, 0.5, False), 100, 50),
)


def one_pass(model, X, w, first, rest, batch, **test):
    """partial_fit over the first batch, then the rest in batches; ``test``
    sets the online EM's test of each batch (its attributes) after the first."""
    model.partial_fit(X[first], sample_weight=None if w is None else w[first])
    stream = getattr(model, "_stream", None)
    for name, value in test.items():
        setattr(stream, name, value)
    for i in range(0, len(rest), batch):
        rows = rest[i : i + batch]
        model.partial_fit(X[rows], sample_weight=None if w is None else w[rows])
    return model


def _streams(n, d, K, noise, weighted, seed, first_rows=FIRST):
    X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed)
    rng = np.random.default_rng(seed)
    w = rng.lognormal(0.0, 1.5, n) if weighted else None
    order = rng.permutation(n)
    first, rest = order[:first_rows], order[first_rows:]
    orders = {"shuffled": rest, "sorted": rest[np.argsort(y[rest], kind="stable")]}
    return X, y, C, w, first, orders


def _ours(X, y, C, w, first, rest, batch, K, seed, **test):
    model = one_pass(AttentionClustering(K, random_state=seed), X, w, first, rest, batch, **test)
    return {
        "update": type(model._stream).__name__,
        "ARI": adjusted_rand_score(y, model.predict(X)),
        "distance": centroid_distance(model.cluster_centers_, C),
        "refused": getattr(model._stream, "refused", 0),
        "ordered": bool(getattr(model._stream, "ordered", False)),
        "batches": int(np.ceil(len(rest) / batch)),
    }


def one_mixture(n, d, K, noise, weighted, seed):
    X, y, C, w, first, orders = _streams(n, d, K, noise, weighted, seed)
    rows = []
    for batch in BATCHES:
        for name, rest in orders.items():
            row = {"n": n, "d": d, "K": K, "noise": noise, "weighted": weighted, "seed": seed}
            row.update(batch=batch, order=name)
            ours = _ours(X, y, C, w, first, rest, batch, K, seed)
            row["update"] = ours["update"]
            row["refused"], row["batches"] = ours["refused"], ours["batches"]
            row["ordered"] = ours["ordered"]
            off = _ours(X, y, C, w, first, rest, batch, K, seed, significance=0.0)
            theirs = one_pass(
                MiniBatchKMeans(K, n_init=1, random_state=seed), X, w, first, rest, batch
            )
            for key, ari, distance in (
                ("partial_fit", ours["ARI"], ours["distance"]),
                ("test off", off["ARI"], off["distance"]),
                (
                    "MiniBatchKMeans",
                    adjusted_rand_score(y, theirs.predict(X)),
                    centroid_distance(theirs.cluster_centers_, C),
                ),
            ):
                row[key + " ARI"], row[key + " distance"] = ari, distance
            rows.append(row)
    return rows


def sweep(seeds):
    """Each (significance, min_effect) on batches of 100 of the SWEPT
    mixtures: shuffled streams' distance over that of the recursion with the
    test off, sorted streams' ARI, and the share of shuffled batches refused."""
    out = []
    for n, d, K, noise, weighted in SWEPT:
        for seed in range(seeds):
            X, y, C, w, first, orders = _streams(n, d, K, noise, weighted, seed)
            off = _ours(X, y, C, w, first, orders["shuffled"], 100, K, seed, significance=0.0)
            for significance in SIGNIFICANCES:
                for min_effect in MIN_EFFECTS:
                    test = {"significance": significance, "min_effect": min_effect}
                    shuffled = _ours(X, y, C, w, first, orders["shuffled"], 100, K, seed, **test)
                    ordered = _ours(X, y, C, w, first, orders["sorted"], 100, K, seed, **test)
                    out.append(
                        {
                            "n": n,
                            "d": d,
                            "K": K,
                            "noise": noise,
                            "seed": seed,
                            **test,
                            "shuffled over off": shuffled["distance"] / off["distance"],
                            "shuffled refused": shuffled["refused"] / shuffled["batches"],
                            "shuffled ordered": shuffled["ordered"],
                            "sorted ordered": ordered["ordered"],
                            "sorted ARI": ordered["ARI"],
                        }
                    )
    return out


def small_first(seeds):
    """The SMALL_FIRST cells, shuffled and sorted: whether the stream is
    taken for an ordered one, the share of batches refused, ARI, and the
    distance over that of the same stream with the test off."""
    out = []
    for (n, d, K, noise, weighted), first_rows, batch in SMALL_FIRST:
        for seed in range(seeds):
            X, y, C, w, first, orders = _streams(n, d, K, noise, weighted, seed, first_rows)
            for order, rest in orders.items():
                ours = _ours(X, y, C, w, first, rest, batch, K, seed)
                off = _ours(X, y, C, w, first, rest, batch, K, seed, significance=0.0)
                out.append(
                    {
                        "n": n,
                        "d": d,
                        "K": K,
                        "noise": noise,
                        "weighted": weighted,
                        "first": first_rows,
                        "batch": batch,
                        "seed": seed,
                        "order": order,
                        "ordered": ours["ordered"],
                        "refused": ours["refused"] / ours["batches"],
                        "ARI": ours["ARI"],
                        "test off ARI": off["ARI"],
                        "over test off": ours["distance"] / off["distance"],
                    }
                )
    return out


def main(quick=False, out=None):
    seeds = 1 if quick else 5
    load_before = os.getloadavg()
    rows = []
    for n, d, K, noise, weighted in MIXTURES:
        for seed in range(seeds):
            rows += one_mixture(n, d, K, noise, weighted, seed)
            print(f"n={n} d={d} K={K} sigma={noise} weighted={weighted} seed={seed}", flush=True)
    payload = {
        "quick": quick,
        "first": FIRST,
        "rows": rows,
        "sweep": sweep(seeds),
        "small first": small_first(2 * seeds),
        **run_conditions(load_before),
    }
    save("stream_order", payload, **({"directory": out} if out else {}))
    from _scaling_page import write_page

    write_page(Path(out) if out else RESULTS, Path(out) if out else ROOT / "docs")
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main)
