"""Warm fit time of AttentionClustering against KMeans(n_init=1), side by side.

n=100000, d=10, K=2 on the paper's mixture at sigma in {0.3, 1}. Every
candidate is warmed up (Numba compiled) first; then the candidates are
timed in interleaved rounds and the medians compared. The compile a first
fit pays with an empty Numba cache, and the import, are cold_start.py's.
Writes benchmarks/results/fit_time.json, with the machine's load average
and the libraries' versions.

    python benchmarks/fit_time.py [--quick] [--out DIR] [--n 100000] [--repeats 7]
"""

import os

from _common import one_thread, quick_cli, run_conditions, save, side_by_side
from sklearn.cluster import KMeans

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture

SOLVERS = ["psgd", "full"]


def main(quick=False, out=None, n=None, repeats=None, d=10, K=2):
    n = n or (3000 if quick else 100_000)
    repeats = repeats or (2 if quick else 7)
    load_before = os.getloadavg()
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
    payload = {
        "quick": quick,
        "n_samples": n,
        "n_features": d,
        "n_clusters": K,
        "repeats": repeats,
        "rows": rows,
        **run_conditions(load_before),
    }
    save("fit_time", payload, **({"directory": out} if out else {}))
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main, n={"type": int}, repeats={"type": int})
