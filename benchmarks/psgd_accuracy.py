"""PSGD on the paper's mixture: distance to the centroids and ARI, 10 seeds.

The paper's setting (d=10, n=20000, random start on the sphere, default
settings of AttentionClustering with solver="psgd"), K=2 at sigma in
{0.3, 1} and K=3 at sigma=0.3. Reports the median and the worst distance
(math.md section 5) over the seeds, and the ARI against KMeans(n_init=1)
fitted on the same data. Writes benchmarks/results/psgd_accuracy.json, with
the machine's load average and the libraries' versions.

    python benchmarks/psgd_accuracy.py [--quick] [--out DIR] [--seeds 10]
"""

import os

import numpy as np
from _common import quick_cli, run_conditions, save
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance

SETTINGS = [(2, 0.3, 1e-2), (2, 1.0, 1e-1), (3, 0.3, 3e-2)]


def main(quick=False, out=None, seeds=None, d=10):
    seeds = seeds or (2 if quick else 10)
    n = 2000 if quick else 20000
    load_before = os.getloadavg()
    rows = []
    for K, noise, target in SETTINGS:
        dist, gap = [], []
        for seed in range(seeds):
            X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed)
            model = AttentionClustering(K, solver="psgd", init="random", random_state=seed).fit(X)
            km = KMeans(K, n_init=1, random_state=seed).fit(X)
            dist.append(centroid_distance(model.cluster_centers_, C))
            gap.append(adjusted_rand_score(y, model.labels_) - adjusted_rand_score(y, km.labels_))
        row = {
            "n_clusters": K,
            "noise": noise,
            "median_distance": float(np.median(dist)),
            "max_distance": float(np.max(dist)),
            "target": target,
            "min_ari_minus_kmeans": float(np.min(gap)),
            "median_ari_minus_kmeans": float(np.median(gap)),
        }
        rows.append(row)
        print(
            f"K={K} sigma={noise}: median distance {row['median_distance']:.2e} "
            f"(max {row['max_distance']:.2e}, target <= {target:.0e}); "
            f"ARI - KMeans ARI: median {row['median_ari_minus_kmeans']:+.4f}, "
            f"worst {row['min_ari_minus_kmeans']:+.4f}"
        )
    payload = {
        "quick": quick,
        "n_samples": n,
        "n_features": d,
        "seeds": seeds,
        "rows": rows,
        **run_conditions(load_before),
    }
    save("psgd_accuracy", payload, **({"directory": out} if out else {}))
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main, seeds={"type": int})
