"""Warm fit time of AttentionClustering against KMeans(n_init=1), side by side.

n=100000, d=10, K=2 on the paper's mixture at sigma in {0.3, 1}. Every
candidate is warmed up (Numba compiled) first; then the candidates are
timed in interleaved rounds and the medians compared. The compile a first
fit pays with an empty Numba cache, and the import, are cold_start.py's.

    python benchmarks/fit_time.py [--n 100000] [--repeats 7]
"""

import argparse

from _common import one_thread, save, side_by_side
from sklearn.cluster import KMeans

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture

SOLVERS = ["psgd", "full"]


def main(n=100000, d=10, K=2, repeats=7):
    rows = []
    for noise in (0.3, 1.0):
        X, _, _ = make_mixture(n, d, K, noise=noise, random_state=0)
        candidates = {
            f"AttentionClustering(solver={s!r})": (
                lambda s=s: AttentionClustering(K, solver=s, random_state=0).fit(X)
            )
            for s in SOLVERS
        }
        candidates["KMeans(n_init=1)"] = lambda: KMeans(K, n_init=1, random_state=0).fit(X)
        # KMeans at its default threads and on one (see _common.one_thread).
        candidates["KMeans(n_init=1), 1 thread"] = lambda: one_thread(
            KMeans(K, n_init=1, random_state=0).fit, X
        )
        times = side_by_side(candidates, repeats)
        base = times["KMeans(n_init=1)"]
        for name, t in times.items():
            rows.append({"noise": noise, "method": name, "seconds": t, "ratio_to_kmeans": t / base})
            print(f"sigma={noise}  {name:36s} {t * 1e3:8.1f} ms   x{t / base:.2f} KMeans")
    save(
        "fit_time",
        {"n_samples": n, "n_features": d, "n_clusters": K, "rows": rows},
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    main(args.n, repeats=args.repeats)
