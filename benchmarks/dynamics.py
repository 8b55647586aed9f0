"""SelfAttentionDynamics: how many clusters it finds, how fast, and against its peers.

Measures the dynamics estimator's figures and writes
``results/dynamics.json`` and ``docs/dynamics.md`` (with its plots):

- the number of clusters found with the automatic stopping (the longest
  plateau) on the paper's mixture, d = 10, sigma = 0.5, n = 1e4, K = 2..6,
  10 seeds each (target: the true K in at least 8 of 10 seeds per K);
- the exact dynamics against MeanShift at n = 1e4, d = 10, timed side by
  side in interleaved rounds after Numba's compile (target: at most 2x
  MeanShift's time at equal ARI);
- the subsample path with passive tracers at n = 1e6 (target: under a
  minute), and its agreement with the exact dynamics at n = 1e4;
- MeanShift, HDBSCAN, DBSCAN and AffinityPropagation, at their defaults
  and with the dynamics at its defaults, on the paper's mixture, on
  clusters of unequal sizes and spreads, and on scikit-learn's bundled
  data sets (standardised, then on the sphere): ARI, clusters found, time.

Every method sees the same rows projected on the unit sphere (the
dynamics' own first step). Run ``python benchmarks/dynamics.py``
(``--quick`` for a smoke test into ``--out``).
"""

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _common import (
    ROOT,
    cold_start_times,
    map_runs,
    quick_cli,
    save,
    side_by_side,
    timed,
    unit_rows,
)
from _methods import REAL_DATASETS, load_real
from sklearn.cluster import DBSCAN, HDBSCAN, AffinityPropagation, MeanShift
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from attention_cluster import SelfAttentionDynamics
from attention_cluster._passes import usable_threads
from attention_cluster.datasets import make_centroids, make_mixture

N_FEATURES = 10
NOISE = 0.5
K_RANGE = (2, 3, 4, 5, 6)
MEANSHIFT_BANDWIDTHS = (0.8, 0.9)
MAX_SAMPLES = 512  # size of the subsample whose dynamics is integrated (passive tracers)
PEERS = {
    "SelfAttentionDynamics": lambda: SelfAttentionDynamics(),
    "MeanShift": lambda: MeanShift(),
    "HDBSCAN": lambda: HDBSCAN(copy=True),
    "DBSCAN": lambda: DBSCAN(),
    "AffinityPropagation": lambda: AffinityPropagation(random_state=0),
}


def mixture(n, K, noise, seed, dtype=np.float32):
    """The paper's mixture (orthogonal unit centroids, equal weights), rows on the sphere."""
    X, y, _ = make_mixture(n, N_FEATURES, K, noise=noise, random_state=seed)
    return unit_rows(X).astype(dtype), y


def unequal_mixture(n, seed):
    """Four orthogonal centroids with weights 1:2:3:4 and spreads 0.2, 0.3, 0.4, 0.5."""
    rng = np.random.default_rng(seed)
    C = make_centroids(4, N_FEATURES, random_state=seed)
    weights = np.arange(1, 5) / 10
    spreads = np.array([0.2, 0.3, 0.4, 0.5])
    y = rng.choice(4, size=n, p=weights)
    X = C[y] + spreads[y, None] * rng.standard_normal((n, N_FEATURES))
    return unit_rows(X), y


def recovery_run(n, K, seed):
    X, y = mixture(n, K, NOISE, seed)
    seconds, model = timed(lambda: SelfAttentionDynamics(n_threads=1).fit(X))
    row = dict(
        K=K,
        seed=seed,
        found=int(model.n_clusters_),
        ari=adjusted_rand_score(y, model.labels_),
        seconds=seconds,
        steps=int(model.n_iter_),
        stopping_step=int(model.stopping_step_),
    )
    print(
        f"K={K} seed={seed}: found {row['found']}, ARI {row['ari']:.3f}, {row['steps']} steps, {seconds:.1f} s",
        flush=True,
    )
    return row


def k_recovery(n, seeds, workers):
    """The runs on ``workers`` processes (one thread each): times are per fit, not compared."""
    return map_runs(recovery_run, [(n, K, seed) for K in K_RANGE for seed in range(seeds)], workers)


def speed(n, K, repeats):
    """Exact dynamics against MeanShift (its best bandwidth on a grid), side by side."""
    X, y = mixture(n, K, NOISE, seed=0)
    grid, fitted = {}, {}
    for bw in MEANSHIFT_BANDWIDTHS:
        s, fitted[bw] = timed(lambda: MeanShift(bandwidth=bw, bin_seeding=True).fit(X))
        ms = fitted[bw]
        grid[bw] = dict(
            ari=adjusted_rand_score(y, ms.labels_), found=len(ms.cluster_centers_), seconds=s
        )
        print(
            f"MeanShift bandwidth {bw}: ARI {grid[bw]['ari']:.3f}, {grid[bw]['found']} clusters, {s:.1f} s",
            flush=True,
        )
    best = max(grid, key=lambda bw: grid[bw]["ari"])
    candidates = {
        "SelfAttentionDynamics": lambda: SelfAttentionDynamics().fit(X),
        "MeanShift": lambda: MeanShift(bandwidth=best, bin_seeding=True).fit(X),
    }
    # Warm-up: the dynamics once (Numba's compile); MeanShift's grid fit at the chosen bandwidth was its own.
    models = {
        "SelfAttentionDynamics": candidates["SelfAttentionDynamics"](),
        "MeanShift": fitted[best],
    }
    times = side_by_side(candidates, repeats=repeats, warmup=False)
    sub = SelfAttentionDynamics(max_samples=MAX_SAMPLES, random_state=0).fit(X)
    out = dict(
        n=n,
        K=K,
        noise=NOISE,
        threads=usable_threads(),
        bandwidth_grid={str(k): v for k, v in grid.items()},
        bandwidth=best,
        repeats=repeats,
        seconds=times,
        ratio=times["SelfAttentionDynamics"] / times["MeanShift"],
        ari={name: adjusted_rand_score(y, m.labels_) for name, m in models.items()},
        found={
            "SelfAttentionDynamics": int(models["SelfAttentionDynamics"].n_clusters_),
            "MeanShift": len(models["MeanShift"].cluster_centers_),
        },
        subsample_agreement=adjusted_rand_score(
            models["SelfAttentionDynamics"].labels_, sub.labels_
        ),
        subsample_ari=adjusted_rand_score(y, sub.labels_),
        subsample_found=int(sub.n_clusters_),
    )
    out["compile"] = cold_start_times(
        "import numpy as np; from attention_cluster import SelfAttentionDynamics; "
        "SelfAttentionDynamics().fit(np.random.default_rng(0).standard_normal((50, 3)))"
    )
    print(
        f"n={n}: dynamics {times['SelfAttentionDynamics']:.2f} s, MeanShift {times['MeanShift']:.2f} s, "
        f"ratio {out['ratio']:.2f}; ARI {out['ari']}; subsample agreement {out['subsample_agreement']:.3f}",
        flush=True,
    )
    return out, models["SelfAttentionDynamics"]


def large(n, K, max_samples):
    X, y = mixture(n, K, NOISE, seed=0)
    seconds, model = timed(
        lambda: SelfAttentionDynamics(max_samples=max_samples, random_state=0).fit(X)
    )
    out = dict(
        n=n,
        K=K,
        max_samples=max_samples,
        seconds=seconds,
        found=int(model.n_clusters_),
        ari=adjusted_rand_score(y, model.labels_),
        steps=int(model.n_iter_),
    )
    print(
        f"n={n:.0e} subsample {max_samples}: {seconds:.1f} s, found {model.n_clusters_}, ARI {out['ari']:.3f}",
        flush=True,
    )
    return out


def peer_datasets(n, quick):
    sets = {
        f"mixture K=4, sigma={NOISE}": mixture(n, 4, NOISE, seed=0, dtype=np.float64),
        "mixture K=4, sigma=0.3": mixture(n, 4, 0.3, seed=0, dtype=np.float64),
        "unequal sizes and spreads, K=4": unequal_mixture(n, seed=0),
    }
    for name in REAL_DATASETS[:2] if quick else REAL_DATASETS:
        X, y = load_real(name)
        sets[name] = (unit_rows(StandardScaler().fit_transform(X)), y)
    return sets


def peers(n, quick):
    rows = []
    for data_name, (X, y) in peer_datasets(n, quick).items():
        for method, make in PEERS.items():
            seconds, model = timed(lambda: make().fit(X))
            labels = model.labels_
            found = len(set(labels) - {-1})
            rows.append(
                dict(
                    data=data_name,
                    method=method,
                    n=len(X),
                    true_K=len(np.unique(y)),
                    found=found,
                    ari=adjusted_rand_score(y, labels),
                    noise_share=float(np.mean(labels == -1)),
                    seconds=seconds,
                )
            )
            print(
                f"{data_name} / {method}: ARI {rows[-1]['ari']:.3f}, {found} clusters, {seconds:.2f} s",
                flush=True,
            )
    return rows


def staircase(model):
    return dict(
        n_clusters=model.n_clusters_path_.tolist(),
        energy=model.energy_path_.tolist(),
        stopping_step=int(model.stopping_step_),
    )


def main(quick=False, out=None):
    n = 1000 if quick else 10**4
    seeds = 1 if quick else 10
    payload = {"quick": quick, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    payload["speed"], model = speed(n, 4, repeats=1 if quick else 3)
    payload["staircase"] = staircase(model)
    payload["large"] = large(2 * 10**4 if quick else 10**6, 4, MAX_SAMPLES)
    payload["k_recovery"] = k_recovery(n, seeds, workers=1 if quick else 2)
    payload["peers"] = peers(400 if quick else 2000, quick)
    save("dynamics", payload, **({"directory": out} if out else {}))
    write_page(payload, out)
    return payload


def _plots(payload, static, prefix):
    rec = payload["k_recovery"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), layout="constrained")
    ax = axes[0]
    for K in K_RANGE:
        found = [r["found"] for r in rec if r["K"] == K]
        values, counts = np.unique(found, return_counts=True)
        ax.scatter(np.full(len(values), K), values, s=40 * counts, alpha=0.6)
    ax.plot([1.5, 6.5], [1.5, 6.5], "k:", linewidth=0.8)
    ax.set_xlabel("true K")
    ax.set_ylabel("clusters found (area: seeds)")
    ax.set_title("Automatic stopping")
    st = payload["staircase"]
    ax = axes[1]
    ax.step(range(len(st["n_clusters"])), st["n_clusters"], where="post")
    ax.axvline(st["stopping_step"], color="k", linestyle=":", label="stopping step")
    ax.set_yscale("log")
    ax.set_xlabel("step (layer)")
    ax.set_ylabel("number of clusters")
    ax.legend()
    ax.set_title("The staircase (K = 4)")
    ax = axes[2]
    ax.plot(st["energy"])
    ax.set_xlabel("step (layer)")
    ax.set_ylabel("E_beta")
    ax.set_title("Interaction energy")
    fig.savefig(static / f"{prefix}_clusters.png", dpi=90)
    plt.close(fig)

    rows = payload["peers"]
    data = list(dict.fromkeys(r["data"] for r in rows))
    methods = list(PEERS)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), layout="constrained")
    width = 0.8 / len(methods)
    for i, m in enumerate(methods):
        sel = [next(r for r in rows if r["data"] == d and r["method"] == m) for d in data]
        x = np.arange(len(data)) + i * width
        axes[0].bar(x, [r["ari"] for r in sel], width, label=m)
        axes[1].bar(x, [r["found"] / r["true_K"] for r in sel], width, label=m)
        axes[2].bar(x, [r["seconds"] for r in sel], width, label=m)
    for ax, title in zip(axes, ("ARI", "clusters found / true K", "time (s)")):
        ax.set_xticks(
            np.arange(len(data)) + 0.4 - width / 2, data, rotation=30, ha="right", fontsize="small"
        )
        ax.set_title(title)
    axes[1].axhline(1, color="k", linestyle=":")
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize="small")
    fig.savefig(static / f"{prefix}_peers.png", dpi=90)
    plt.close(fig)


def write_page(payload, out=None):
    docs = Path(out) if out else ROOT / "docs"
    static = docs if out else docs / "_static" / "benchmarks"
    static.mkdir(parents=True, exist_ok=True)
    prefix = "dynamics"
    _plots(payload, static, prefix)
    img = "" if out else "_static/benchmarks/"
    rec = payload["k_recovery"]
    seeds = len([r for r in rec if r["K"] == K_RANGE[0]])
    hits = {K: sum(r["found"] == K for r in rec if r["K"] == K) for K in K_RANGE}
    sp, lg = payload["speed"], payload["large"]
    equal_ari = abs(sp["ari"]["SelfAttentionDynamics"] - sp["ari"]["MeanShift"]) <= 0.02
    lines = [
        "# How many clusters: the self-attention dynamics",
        "",
        "<!-- Generated by benchmarks/dynamics.py; do not edit. -->",
        "",
        "`SelfAttentionDynamics()` at its defaults (SA model on the sphere, beta = 10, mean-shift "
        "steps, stopping at the longest plateau of the number of clusters; {doc}`math` section 8), "
        "on rows projected on the unit sphere. Produced by "
        f"`python benchmarks/dynamics.py{' --quick' if payload['quick'] else ''}` "
        f"(run started {payload['started']}), numbers in `benchmarks/results/dynamics.json`.",
        "",
        "## The number of clusters found",
        "",
        f"The paper's mixture, d = {N_FEATURES}, sigma = {NOISE}, n = {sp['n']:.0e}, {seeds} seeds per K, "
        "float32. Target: the true K in at least 8 of 10 seeds per K.",
        "",
        "| true K | seeds with K found | clusters found | median ARI | median fit (s) | median steps |",
        "|---|---|---|---|---|---|",
    ]
    for K in K_RANGE:
        sel = [r for r in rec if r["K"] == K]
        lines.append(
            f"| {K} | **{hits[K]} / {len(sel)}** | {', '.join(str(r['found']) for r in sel)} | "
            f"{np.median([r['ari'] for r in sel]):.3f} | {np.median([r['seconds'] for r in sel]):.1f} | "
            f"{np.median([r['steps'] for r in sel]):.0f} |"
        )
    met = all(h >= 0.8 * seeds for h in hits.values())
    lines += [
        "",
        f"**Target {'met' if met else 'not met'}** ({sum(hits.values())} of {len(rec)} runs find the true K).",
        "",
        f"![clusters found, staircase and energy]({img}{prefix}_clusters.png)",
        "",
        "The staircase is the number of clusters along the steps of one run (K = 4, seed 0): the "
        "tokens gather into many small groups, then into K clusters that persist; the energy "
        "E_beta rises as they gather.",
        "",
        "## Speed against MeanShift",
        "",
        f"n = {sp['n']:.0e}, d = {N_FEATURES}, K = {sp['K']}, sigma = {NOISE}, float32; the dynamics on its "
        f"default thread pool ({sp.get('threads', 2)} threads, the cores of this shared machine), MeanShift in "
        "one process (its default `n_jobs`). MeanShift "
        f"(`bin_seeding=True`) at the bandwidth of the grid {list(MEANSHIFT_BANDWIDTHS)} with the best ARI "
        f"({sp['bandwidth']}; a choice that needs the labels, so it favours MeanShift). Median of "
        f"{sp['repeats']} interleaved rounds after a warm-up; Numba's compile is excluded and reported "
        f"apart: {sp['compile']['first_call_s']:.1f} s for the first fit in a fresh process with an empty "
        "cache.",
        "",
        "| method | fit (s) | ARI | clusters found |",
        "|---|---|---|---|",
    ]
    for name in ("SelfAttentionDynamics", "MeanShift"):
        lines.append(
            f"| {name} | {sp['seconds'][name]:.2f} | {sp['ari'][name]:.3f} | {sp['found'][name]} |"
        )
    lines += [
        "",
        f"**Time ratio dynamics / MeanShift: {sp['ratio']:.2f}** (target: at most 2 at equal ARI; the "
        f"ARIs {'are' if equal_ari else 'are not'} within 0.02). MeanShift's grid:",
        "",
        "| bandwidth | ARI | clusters | fit (s) |",
        "|---|---|---|---|",
    ]
    for bw, g in sp["bandwidth_grid"].items():
        lines.append(f"| {bw} | {g['ari']:.3f} | {g['found']} | {g['seconds']:.1f} |")
    lines += [
        "",
        "## Large n: a subsample with passive tracers",
        "",
        f"`SelfAttentionDynamics(max_samples={lg['max_samples']})`: the dynamics of {lg['max_samples']} "
        "random tokens, the others carried along as passive tracers.",
        "",
        f"- n = {lg['n']:.0e}, K = {lg['K']}: **{lg['seconds']:.1f} s** (target: under a minute), "
        f"{lg['found']} clusters found, ARI {lg['ari']:.3f}, {lg['steps']} steps.",
        f"- Agreement with the exact dynamics at n = {sp['n']:.0e} (same data as above): ARI between the two "
        f"labellings {sp['subsample_agreement']:.3f}; ARI with the truth {sp['subsample_ari']:.3f} against "
        f"{sp['ari']['SelfAttentionDynamics']:.3f} for the exact dynamics; {sp['subsample_found']} clusters found.",
        "",
        "## Against the peers that also find K",
        "",
        "Every method at its scikit-learn defaults (AffinityPropagation with `random_state=0`), the "
        "dynamics at its own, on the same rows on the sphere; real data standardised first. One fit "
        "each, single runs (not interleaved), for scale. DBSCAN and HDBSCAN leave noise points "
        "(label -1) out of their clusters; the ARI counts them as one more group.",
        "",
        "| data | n | true K | method | clusters found | ARI | noise points | fit (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["peers"]:
        lines.append(
            f"| {r['data']} | {r['n']} | {r['true_K']} | {r['method']} | {r['found']} | {r['ari']:.3f} | "
            f"{100 * r['noise_share']:.0f} % | {r['seconds']:.2f} |"
        )
    lines += [
        "",
        f"![peers]({img}{prefix}_peers.png)",
        "",
        "### Where it wins and where it loses",
        "",
    ]
    for data in dict.fromkeys(r["data"] for r in payload["peers"]):
        sel = [r for r in payload["peers"] if r["data"] == data]
        ours = next(r for r in sel if r["method"] == "SelfAttentionDynamics")
        best = max(sel, key=lambda r: r["ari"])
        if best is ours or best["ari"] - ours["ari"] <= 0.02:
            lines.append(
                f"- {data}: best ARI or within 0.02 of it ({ours['ari']:.3f}, {ours['found']} clusters)."
            )
        else:
            lines.append(
                f"- {data}: **loses** to {best['method']} (ARI {ours['ari']:.3f} against {best['ari']:.3f}; "
                f"{ours['found']} clusters found for {ours['true_K']})."
            )
    wrong_k = [
        r
        for r in payload["peers"]
        if r["method"] == "SelfAttentionDynamics" and r["found"] != r["true_K"]
    ]
    if wrong_k:
        lines.append(
            "- Wrong number of clusters: "
            + "; ".join(f"{r['data']}, {r['found']} for {r['true_K']}" for r in wrong_k)
            + "."
        )
    slower = {}
    for data in dict.fromkeys(r["data"] for r in payload["peers"]):
        sel = {r["method"]: r for r in payload["peers"] if r["data"] == data}
        fastest = min(sel.values(), key=lambda r: r["seconds"])
        if fastest["method"] != "SelfAttentionDynamics":
            slower[data] = (
                fastest["method"],
                sel["SelfAttentionDynamics"]["seconds"] / max(fastest["seconds"], 1e-9),
            )
    if slower:
        lines.append(
            "- Time: slower than the fastest peer on "
            + "; ".join(f"{d} ({m}, {ratio:.0f}x)" for d, (m, ratio) in slower.items())
            + "; a step costs O(n^2 d)."
        )
    lines += [
        "",
        "The peers run at their defaults, which do not suit rows on the sphere (MeanShift's estimated "
        "bandwidth merges everything into one cluster); with its bandwidth tuned on the labels, MeanShift "
        "ties the dynamics' ARI (the speed section above) at several times its time.",
    ]
    (docs / "dynamics.md").write_text("\n".join(lines).rstrip() + "\n")


if __name__ == "__main__":
    quick_cli(__doc__, main)
