"""The page ``docs/benchmarks.md`` and its figures, generated from the results.

Every number and every comparison on the page is computed here from the
rows that ``run.py`` measured; the only fixed prose describes the methods
and the model's assumptions.
"""

import re
from collections import defaultdict
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from _common import load_numbers, loglog_slope  # noqa: E402
from _methods import FLOOR  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

# ARI differences below this are reported as ties.
TIE = 0.01
# A loss worth a sentence.
LOSS = 0.05
# Sections in the order the page shows them.
PAGE_ORDER = ["synthetic", "scaling", "cold_start", "real"]
# Slopes are fitted on the largest sizes measured, where fixed costs fade.
SLOPE_POINTS = 3

SHORT = {
    "InContextQuantizer -> KMeans": "ICQ -> KMeans",
    "MiniBatchKMeans": "MiniBatchKMeans",
    "GaussianMixture(spherical)": "GMM (spherical)",
    "GaussianMixture(full)": "GMM (full)",
    "SpectralClustering": "Spectral",
    FLOOR: "X @ W",
}


def short(name):
    if name.startswith("AttentionClustering(solver="):
        return "AC " + name[len("AttentionClustering(solver=") : -1].strip("'")
    return SHORT.get(name, name)


def is_ac(name):
    return name.startswith("AttentionClustering(")


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_size(size):
    """1000 -> "1000", 1000000 -> "1e6", 30000 -> "3e4"."""
    if size < 10**4:
        return f"{size:g}"
    mantissa, exponent = f"{size:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def fmt(x, spec=".2f"):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def bold_best(value, best):
    """``fmt(value)``, in bold when it reads the same as the best value."""
    cell = fmt(value)
    return f"**{cell}**" if value is not None and cell == fmt(best) else cell


def table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def methods_in(rows):
    """Method names in order of first appearance."""
    return list(dict.fromkeys(r["method"] for r in rows))


def mean_of(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def group(rows, keys):
    """(key values) -> method -> rows, with keys in first-appearance order."""
    out = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[tuple(r[k] for k in keys)][r["method"]].append(r)
    return out


def slug(text):
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def best_other(by_method, key="ari"):
    """(name, value) of the best method that is not AttentionClustering."""
    scored = [(mean_of(rs, key), m) for m, rs in by_method.items() if not is_ac(m) and m != FLOOR]
    scored = [(v, m) for v, m in scored if v is not None]
    if not scored:
        return None, None
    v, m = max(scored)
    return m, v


# ---------------------------------------------------------------- synthetic


SETTING = ("design", "noise", "n_features", "n_clusters", "n_samples")
FACTORS = {"design": "design", "n_clusters": "K", "n_features": "d", "noise": "sigma"}


def setting_gaps(rows, ac):
    """One record per setting: ARI of ``ac``, of the best other method, and data facts.

    Values are means over seeds.
    """
    out = []
    for key, by in group(rows, SETTING).items():
        other, other_ari = best_other(by)
        mine = mean_of(by.get(ac, []), "ari")
        if mine is None or other is None:
            continue
        first = next(iter(by.values()))
        out.append(
            dict(
                zip(SETTING, key),
                ari=mine,
                other=other,
                other_ari=other_ari,
                gap=mine - other_ari,
                excess=mean_of(by[ac], "error") - mean_of(first, "bayes_error"),
                max_cos=mean_of(first, "max_cos_centroids"),
            )
        )
    return out


def describe(rec):
    return (
        f"{rec['design']}, sigma={rec['noise']:g}, d={rec['n_features']}, K={rec['n_clusters']}, "
        f"n={rec['n_samples']}"
    )


def synthetic_section(rows, figures, lines, losses):
    lines.append("## Synthetic mixtures\n")
    n_values = sorted({r["n_samples"] for r in rows})
    designs = list(dict.fromkeys(r["design"] for r in rows))
    methods = methods_in(rows)
    lines.append(
        "The mixture of the paper, ``x = mu*_z + sigma eps``, with unit centroids, in a 2 x 2 "
        "design: centroids orthogonal (the paper's assumption) or drawn uniformly on the sphere "
        "(not orthogonal; nearly so when d is large), and weights equal (the paper's "
        "assumption) or growing linearly from the smallest to 3 times the smallest. "
        f"n = {', '.join(str(n) for n in n_values)}; values are means over "
        f"{len({r['seed'] for r in rows})} seed(s). The Bayes error is the error rate of the "
        "Bayes rule ``argmax_c log w_c - ||x - mu*_c||^2 / (2 sigma^2)`` that knows the true "
        "parameters, the floor of any method's error; *Bayes ARI* is that rule's ARI on the "
        "same data.\n"
    )
    lines.append("### Summary\n")
    lines.append("Median ARI over the settings of each design:\n")
    body = []
    for design in designs:
        by = group(
            [r for r in rows if r["design"] == design],
            ("noise", "n_features", "n_clusters", "n_samples"),
        )
        med = {m: np.median([mean_of(b[m], "ari") for b in by.values() if m in b]) for m in methods}
        bayes = np.median([mean_of(next(iter(b.values())), "bayes_ari") for b in by.values()])
        body.append(
            [design, len(by), fmt(bayes)] + [bold_best(med[m], max(med.values())) for m in methods]
        )
    lines.append(
        table(["design", "settings", "Bayes ARI"] + [short(m) for m in methods], body) + "\n"
    )
    for ac in [m for m in methods if is_ac(m)]:
        recs = setting_gaps(rows, ac)
        parts = []
        for factor, label in FACTORS.items():
            levels = list(dict.fromkeys(r[factor] for r in recs))
            if len(levels) < 2:
                continue
            cells = []
            for level in levels:
                name = level if isinstance(level, str) else f"{label}={level:g}"
                cells.append(
                    f"{name}: {np.median([r['gap'] for r in recs if r[factor] == level]):+.2f}"
                )
            parts.append(f"  - by {label}: " + "; ".join(cells))
        if parts:
            lines.append(f"- **{short(ac)}**, median ARI difference to the best other method:")
            lines += parts
    lines.append("")
    for design in designs:
        d_rows = [r for r in rows if r["design"] == design]
        settings = group(d_rows, ("noise", "n_features", "n_clusters", "n_samples"))
        lines.append(f"### {design.capitalize()}\n")
        lines += synthetic_sentences(d_rows, methods, losses) + [""]
        name = f"synthetic_{slug(design)}.png"
        plot_synthetic(d_rows, methods, figures / name, design)
        lines.append(f"![Error rate against sigma, {design}](_static/benchmarks/{name})\n")
        header = ["sigma", "d", "K"] + (["n"] if len(n_values) > 1 else [])
        header += ["max abs cos", "Bayes ARI"] + [short(m) for m in methods]
        ari_body, dist_body = [], []
        for key in sorted(settings):
            noise, d, K, n = key
            by = settings[key]
            first = next(iter(by.values()))
            lead = [fmt(noise, "g"), d, K] + ([n] if len(n_values) > 1 else [])
            aris = {m: mean_of(by[m], "ari") for m in methods if m in by}
            top = max(v for v in aris.values() if v is not None)
            cells = [bold_best(aris.get(m), top) for m in methods]
            ari_body.append(
                lead
                + [fmt(mean_of(first, "max_cos_centroids")), fmt(mean_of(first, "bayes_ari"))]
                + cells
            )
            dist_body.append(
                lead
                + [
                    fmt(mean_of(first, "max_cos_centroids")),
                    fmt(mean_of(first, "bayes_error"), ".3f"),
                ]
                + [fmt(mean_of(by.get(m, []), "distance"), ".2g") for m in methods]
            )
        lines.append("ARI (best of each row in bold):\n")
        lines.append(table(header, ari_body) + "\n")
        lines.append(
            "Distance to the true centroids, ``min over relabelling and signs of sum_h "
            "||mu_h - mu*_h||^2``, every method's centers first normalised to the unit sphere "
            "(so KMeans' and GaussianMixture's means are compared as directions, like the "
            "heads); the Bayes column here is the Bayes error:\n"
        )
        i = header.index("Bayes ARI")
        lines.append(table(header[:i] + ["Bayes error"] + header[i + 1 :], dist_body) + "\n")


def synthetic_sentences(rows, methods, losses):
    out = []
    for ac in [m for m in methods if is_ac(m)]:
        recs = setting_gaps(rows, ac)
        if not recs:
            continue
        gaps = np.array([r["gap"] for r in recs])
        cos = np.array([r["max_cos"] for r in recs])
        ties = int(np.sum(gaps >= -TIE))
        text = (
            f"- **{short(ac)}** matches or beats the best other method (within {TIE} ARI) in "
            f"{ties} of {gaps.size} settings; its median ARI difference to the best other "
            f"method is {np.median(gaps):+.3f}, and its error rate exceeds the Bayes error by "
            f"{np.median([r['excess'] for r in recs]):.3f} in the median setting."
        )
        worst = min(recs, key=lambda r: r["gap"])
        if worst["gap"] < -TIE:
            text += (
                f" Its largest shortfall is at {describe(worst)}: ARI {worst['ari']:.2f} "
                f"against {worst['other_ari']:.2f} for {short(worst['other'])}."
            )
        if np.ptp(cos) > 0.05 and np.ptp(gaps) > 0 and gaps.size >= 4:
            rho = spearmanr(cos, gaps).statistic
            relation = (
                "it falls further behind the less orthogonal the centroids are"
                if rho < -0.3
                else "it does relatively better the less orthogonal the centroids are"
                if rho > 0.3
                else "its ARI difference shows no clear relation to how orthogonal the centroids are"
            )
            text += (
                f" Across settings, {relation} (Spearman correlation of the ARI difference with "
                f"the largest |cos| between true centroids: {rho:+.2f})."
            )
        out.append(text)
        lost = sorted((r for r in recs if r["gap"] < -LOSS), key=lambda r: r["gap"])
        if lost:
            losses.append(
                f"{short(ac)} loses by more than {LOSS} ARI in {len(lost)} of {len(recs)} synthetic "
                f"settings of the {rows[0]['design']} design; the worst: "
                + "; ".join(
                    f"{describe(r)} (ARI {r['ari']:.2f} against {r['other_ari']:.2f}, {short(r['other'])})"
                    for r in lost[:3]
                )
                + "."
            )
    return out


# Font sizes of the figures, in points: read on a laptop screen at the
# page's width (docs/screenshots.py).
FONT = {"title": 12, "label": 11, "tick": 10, "legend": 10}


def legend_outside(fig, handles, labels):
    """One legend for the figure, right of the panels, off the data."""
    fig.legend(
        handles,
        labels,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=FONT["legend"],
        frameon=False,
    )


def plot_synthetic(rows, methods, path, design):
    n_max = max(r["n_samples"] for r in rows)
    rows = [r for r in rows if r["n_samples"] == n_max]
    ds = sorted({r["n_features"] for r in rows})
    Ks = sorted({r["n_clusters"] for r in rows})
    fig, axes = plt.subplots(
        len(ds), len(Ks), figsize=(2.9 * len(Ks), 2.5 * len(ds)), squeeze=False, sharex=True
    )
    for i, d in enumerate(ds):
        for j, K in enumerate(Ks):
            ax = axes[i, j]
            cell = [r for r in rows if r["n_features"] == d and r["n_clusters"] == K]
            by = group(cell, ("noise",))
            noises = sorted(k[0] for k in by)
            for m in methods:
                ys = [mean_of(by[(s,)].get(m, []), "error") for s in noises]
                ys = [np.nan if y is None else y for y in ys]
                ax.plot(noises, ys, marker="o", ms=4, lw=2.5 if is_ac(m) else 1, label=short(m))
            bayes = [mean_of(next(iter(by[(s,)].values())), "bayes_error") for s in noises]
            ax.plot(noises, bayes, "k--", lw=1.5, label="Bayes error")
            ax.set_title(f"d={d}, K={K}", fontsize=FONT["title"])
            ax.tick_params(labelsize=FONT["tick"])
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("error rate", fontsize=FONT["label"])
            if i == len(ds) - 1:
                ax.set_xlabel("sigma", fontsize=FONT["label"])
    fig.suptitle(
        f"{design}, n={n_max}: misclassification rate after relabelling", fontsize=FONT["title"]
    )
    fig.tight_layout()
    legend_outside(fig, *axes[0, 0].get_legend_handles_labels())
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- scaling


def series(rows, method, key):
    pts = sorted(
        (r["size"], r[key]) for r in rows if r["method"] == method and r.get(key) is not None
    )
    return [p[0] for p in pts], [p[1] for p in pts]


def tail_slope(sizes, values):
    sizes, values = sizes[-SLOPE_POINTS:], values[-SLOPE_POINTS:]
    positive = [(s, v) for s, v in zip(sizes, values) if v > 0]
    return loglog_slope(*zip(*positive)) if len(positive) >= 2 else None


def scaling_section(rows, figures, lines):
    lines.append("## Scaling with n, d and K\n")
    design, noise = rows[0]["design"], rows[0]["noise"]
    lines.append(
        f"Data: the {design} mixture at sigma={noise:g}. Each sweep varies one of n, d, K. "
        f"The floor is one pass over the data, ``X @ W`` for a d x K matrix W: no method that "
        "reads every row can be faster. Slopes are least-squares fits of log(time) or "
        f"log(memory) against log(size) over the last {SLOPE_POINTS} sizes each method ran; "
        "a slope of 1 is linear growth. A method is skipped at the sizes where its fit time, "
        "extrapolated from the previous sizes, exceeds the time budget.\n"
    )
    sweeps = list(dict.fromkeys(r["sweep"] for r in rows))
    for key, what, unit in (
        ("fit_s", "time", "fit time (s)"),
        ("peak_mb", "memory", "peak memory (MB)"),
    ):
        name = f"scaling_{what}.png"
        plot_scaling(rows, sweeps, key, unit, figures / name)
        lines.append(f"![{unit} against n, d and K](_static/benchmarks/{name})\n")
    for sweep in sweeps:
        s_rows = [r for r in rows if r["sweep"] == sweep]
        sizes = sorted({r["size"] for r in s_rows})
        methods = methods_in(s_rows)
        var = sweep.split(" ")[0]
        lines.append(f"### Sweep over {sweep}\n")
        lines += scaling_sentences(s_rows, methods, var) + [""]
        for key, label, cell_fmt in (
            ("fit_s", "Warm fit time", fmt_time),
            ("peak_mb", "Peak memory above the data (MB)", lambda v: fmt(v, ".3g")),
            ("ari", "ARI", fmt),
        ):
            if key == "ari" and var != "n":
                continue
            body = []
            for m in methods:
                if key == "ari" and m == FLOOR:
                    continue
                by_size = {r["size"]: r for r in s_rows if r["method"] == m}
                cells = []
                for s in sizes:
                    r = by_size.get(s)
                    cells.append(
                        "skipped"
                        if r is not None and r.get("skipped")
                        else "-"
                        if r is None
                        else cell_fmt(r.get(key))
                    )
                slope = tail_slope(*series(s_rows, m, key)) if key != "ari" else None
                body.append([short(m)] + cells + ([fmt(slope)] if key != "ari" else []))
            header = (
                ["method"]
                + [f"{var}={fmt_size(s)}" for s in sizes]
                + (["slope"] if key != "ari" else [])
            )
            lines.append(f"{label}:\n")
            lines.append(table(header, body) + "\n")
        skipped = {}  # the first reason, at the smallest size skipped
        for r in sorted(s_rows, key=lambda r: r["size"]):
            if r.get("skipped"):
                skipped.setdefault(r["method"], r["skipped"])
        for m, why in skipped.items():
            lines.append(f"- {short(m)} skipped: {why}.")
        if skipped:
            lines.append("")


def scaling_sentences(rows, methods, var):
    out = []
    floor_slope = tail_slope(*series(rows, FLOOR, "fit_s"))
    for ac in [m for m in methods if is_ac(m)]:
        sizes, times = series(rows, ac, "fit_s")
        if not sizes:
            continue
        slope = tail_slope(sizes, times)
        text = f"- **{short(ac)}**: fit time slope {fmt(slope)} in {var}"
        km_slope = tail_slope(*series(rows, "KMeans", "fit_s"))
        text += f" (KMeans {fmt(km_slope)}, one pass {fmt(floor_slope)})."
        km = dict(zip(*series(rows, "KMeans", "fit_s")))
        floor = dict(zip(*series(rows, FLOOR, "fit_s")))
        common = [s for s in sizes if s in km]
        if common:
            s = common[-1]
            t = dict(zip(sizes, times))[s]
            text += f" At {var}={fmt_size(s)} it takes {fmt_time(t)}, {t / km[s]:.2g} x KMeans"
            text += f" and {t / floor[s]:.3g} x one pass over the data." if s in floor else "."
        mem_slope = tail_slope(*series(rows, ac, "peak_mb"))
        text += f" Peak memory slope {fmt(mem_slope)}."
        out.append(text)
    return out


def plot_scaling(rows, sweeps, key, ylabel, path):
    fig, axes = plt.subplots(1, len(sweeps), figsize=(3.3 * len(sweeps), 3.2), squeeze=False)
    # One colour per method in every panel, so that one legend serves all;
    # the slopes are in the page's tables.
    colours = {m: f"C{i}" for i, m in enumerate(m for m in methods_in(rows) if m != FLOOR)}
    handles = {}
    for ax, sweep in zip(axes[0], sweeps):
        s_rows = [r for r in rows if r["sweep"] == sweep]
        for m in methods_in(s_rows):
            sizes, values = series(s_rows, m, key)
            if not sizes:
                continue
            if m == FLOOR:
                style = dict(color="k", ls="--", lw=2)
            else:
                style = dict(color=colours[m], marker="o", ms=3, lw=2.5 if is_ac(m) else 1)
            (handles[short(m)],) = ax.loglog(sizes, values, **style)
        sizes = sorted({r["size"] for r in s_rows})
        ax.set_xticks(sizes, [fmt_size(s) for s in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.tick_params(labelsize=FONT["tick"])
        ax.set_title(sweep, fontsize=FONT["title"])
        ax.set_xlabel(sweep.split(" ")[0], fontsize=FONT["label"])
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].set_ylabel(ylabel, fontsize=FONT["label"])
    fig.tight_layout()
    legend_outside(fig, list(handles.values()), list(handles))
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- real data


PIPELINE_CODE = {
    "raw": "AttentionClustering(n_clusters={K})",
    "StandardScaler": "make_pipeline(StandardScaler(), AttentionClustering(n_clusters={K}))",
    "Normalizer": "make_pipeline(Normalizer(), AttentionClustering(n_clusters={K}))",
    "StandardScaler, Normalizer": "make_pipeline(StandardScaler(), Normalizer(), AttentionClustering(n_clusters={K}))",
    "StandardScaler, PCA(K-1), Normalizer": (
        "make_pipeline(StandardScaler(), PCA({Km1}), Normalizer(), AttentionClustering(n_clusters={K}))"
    ),
    "StandardScaler, PCA(K), Normalizer": (
        "make_pipeline(StandardScaler(), PCA({K}), Normalizer(), AttentionClustering(n_clusters={K}))"
    ),
}


def real_section(rows, figures, lines, losses):
    lines.append("## Real data shipped with scikit-learn\n")
    lines.append(
        "Every labelled data set that scikit-learn ships without download, with K = its number "
        "of classes, under each preprocessing (fitted once on the whole data; the time is the "
        "clusterer's alone). Two diagnostics, computed with the labels, say how far each view "
        "is from the model: *mean share* = ``||mean x||^2 / mean ||x||^2``, the part of the "
        "second moment carried by the common mean (near 1: every point points the same way), "
        "and *max cos* = the largest |cos| between two class means seen as directions from "
        "the origin (the model wants 0).\n"
    )
    name = "real_ari.png"
    plot_real(rows, figures / name)
    lines.append(f"![ARI on real data under each preprocessing](_static/benchmarks/{name})\n")
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        d_rows = [r for r in rows if r["dataset"] == dataset]
        views = list(dict.fromkeys(r["view"] for r in d_rows))
        methods = methods_in(d_rows)
        by = group(d_rows, ("view",))
        first = d_rows[0]
        lines.append(
            f"### {dataset} (n={first['n_samples']}, d={first['n_features']} raw, K={first['n_clusters']})\n"
        )
        lines += real_sentences(dataset, d_rows, views, methods, by, losses) + [""]
        top = max(r["ari"] for r in d_rows if r.get("ari") is not None)
        body = []
        for m in methods:
            cells = []
            for v in views:
                a = mean_of(by[(v,)].get(m, []), "ari")
                cells.append(bold_best(a, top))
            body.append([short(m)] + cells)
        for key, label in (("mean_share", "*mean share*"), ("max_cos", "*max cos*")):
            body.append([label] + [fmt(next(iter(by[(v,)].values()))[0][key]) for v in views])
        lines.append("ARI (best in bold):\n")
        lines.append(table(["method"] + views, body) + "\n")


def centred(row):
    """Whether AttentionClustering's fit of ``row`` centred the data (``center="auto"``):
    the ``centered`` its run recorded; for runs that did not record it, False when
    the fit gave no UserWarning (``"auto"`` warns whenever it centres), else None
    (not known)."""
    if row.get("centered") is not None:
        return row["centered"]
    return None if "UserWarning" in row.get("warnings", ["UserWarning"]) else False


def real_sentences(dataset, rows, views, methods, by, losses):
    out = []
    K = rows[0]["n_clusters"]
    best = max((r for r in rows if r.get("ari") is not None), key=lambda r: r["ari"])
    out.append(
        f"- Best overall: {short(best['method'])} on *{best['view']}*, ARI {best['ari']:.2f}."
    )
    raw = next(iter(by[("raw",)].values()))[0] if ("raw",) in by else None
    for ac in [m for m in methods if is_ac(m)]:
        aris = {v: mean_of(by[(v,)].get(ac, []), "ari") for v in views}
        aris = {v: a for v, a in aris.items() if a is not None}
        if not aris:
            continue
        text = f"- **{short(ac)}**:"
        if raw is not None and "raw" in aris:
            km_raw = mean_of(by[("raw",)].get("KMeans", []), "ari")
            text += f" on the raw data ARI {aris['raw']:.2f} (KMeans {fmt(km_raw)})"
            share = f"; the common mean carries {raw['mean_share']:.0%} of the second moment"
            centre = centred(by[("raw",)][ac][0])
            if centre:
                text += (
                    share + ', and the default ``center="auto"`` subtracted it (with a warning): '
                    "the heads saw the classes' directions from the data's mean, each feature "
                    "in its own unit"
                )
            elif centre is None and raw["mean_share"] > 0.5:
                text += (
                    share + ', which the default ``center="auto"`` subtracts, with a warning, '
                    "when it dominates: this fit warned, but its run did not record whether it "
                    "centred (the users' data page records it for the default fit on the raw "
                    "data sets)"
                )
            elif raw["mean_share"] > 0.5 and aris["raw"] < 0.1:
                text += (
                    share + ", so every point lies near one direction and the heads, which only "
                    "see directions through the origin, cannot tell the classes apart"
                )
            elif raw["mean_share"] > 0.5:
                text += (
                    share + ", yet the classes still differ in direction enough for the heads "
                    "to separate some of them"
                )
            elif raw["max_cos"] > 0.5:
                text += (
                    f"; the class means are far from orthogonal directions (|cos| up to "
                    f"{raw['max_cos']:.2f})"
                )
            text += "."
        v_best = max(aris, key=aris.get)
        view_row = next(iter(by[(v_best,)].values()))[0]
        other, other_ari = best_other(by[(v_best,)])
        code = PIPELINE_CODE[v_best].format(K=K, Km1=max(K - 1, 1))
        text += (
            f" Its best preprocessing is *{v_best}*, ``{code}``: ARI {aris[v_best]:.2f}, "
            f"against {fmt(other_ari)} for the best other method on the same view ({short(other)})"
            f" and {best['ari']:.2f} for the best overall."
        )
        if aris[v_best] < best["ari"] - LOSS:
            centre = centred(by[(v_best,)][ac][0])
            if centre or (centre is None and view_row["mean_share"] > 0.5):
                text += (
                    " It loses here. The view's mean share "
                    f"({view_row['mean_share']:.2f}) and |cos| ({view_row['max_cos']:.2f}) "
                    "describe its rows before the fit's centring, "
                    + (
                        'which ``center="auto"`` made (with a warning)'
                        if centre
                        else "which this run did not record (the fit warned)"
                    )
                    + ", not the directions the heads saw."
                )
            else:
                text += (
                    f" It loses here: in that view the mean share is {view_row['mean_share']:.2f} "
                    f"and the class means have |cos| up to {view_row['max_cos']:.2f}"
                    + (
                        ", far from the near-orthogonal directions the model assumes."
                        if view_row["max_cos"] > 0.3
                        else ", so the directions are near-orthogonal and the loss comes from "
                        "elsewhere (classes that overlap as directions, or that a direction "
                        "through the origin does not describe)."
                    )
                )
            losses.append(
                f"{dataset}: {short(ac)} at best ARI {aris[v_best]:.2f} ({v_best}) against "
                f"{best['ari']:.2f} for {short(best['method'])} ({best['view']})."
            )
        if view_row["n_features"] < K:
            text += (
                f" (This view has d={view_row['n_features']} < K={K}: the heads cannot be "
                "orthogonal, and the estimator warns.)"
            )
        out.append(text)
    return out


def plot_real(rows, path):
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    views = list(dict.fromkeys(r["view"] for r in rows))
    methods = methods_in(rows)
    ncols = min(2, len(datasets))
    nrows = -(-len(datasets) // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(4.2 * ncols, 2.4 * nrows + 2.2),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    for ax in axes.flat[len(datasets) :]:
        ax.set_visible(False)
    for ax, dataset in zip(axes.flat, datasets):
        by = group([r for r in rows if r["dataset"] == dataset], ("view", "method"))
        for m in methods:
            ys = [mean_of(by[(v, m)].get(m, []), "ari") if (v, m) in by else None for v in views]
            ys = [np.nan if y is None else y for y in ys]
            ax.plot(
                range(len(views)), ys, marker="o", ms=4, lw=2.5 if is_ac(m) else 0.8, label=short(m)
            )
        ax.set_xticks(range(len(views)))
        ax.set_xticklabels(views, fontsize=FONT["tick"], rotation=90)
        ax.tick_params(axis="y", labelsize=FONT["tick"])
        ax.set_title(dataset, fontsize=FONT["title"])
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("ARI", fontsize=FONT["label"])
    fig.tight_layout()
    legend_outside(fig, *axes[0, 0].get_legend_handles_labels())
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- page


ASSUMPTIONS = (
    "AttentionClustering's model (paper, section 2) has clusters that are *directions through "
    "the origin*: a point goes to the head ``mu_h`` with the largest ``<x, mu_h>``, and the "
    "heads are learned as near-orthogonal unit vectors, at a minimiser of a risk whose theory "
    "assumes clusters of equal weight (K = 2 in the paper, K = 3 in the authors' rebuttal). "
    "Data with a large common mean (raw measurements that are all positive, say) put every "
    "point near the same direction, so no set of near-orthogonal heads separates them: the "
    'default ``center="auto"`` subtracts such a mean, with a warning, and the heads then see '
    "directions from the data's mean, each feature in its own unit; ``StandardScaler`` "
    "centres too, and puts the features on one scale. Clusters whose means are far from "
    "orthogonal directions (few dimensions, or classes that differ by magnitude rather than "
    "direction) are not the model's clusters either: ``Normalizer`` keeps only directions, "
    "and a PCA keeps the directions in which the classes differ. The results that put the "
    "risk's minimisers on the centroids assume equal weights: with unequal weights nothing "
    "guarantees it, and the orthogonal, unbalanced design above measures how far the heads "
    "move. KMeans and GaussianMixture model centres anywhere in space, "
    "with any weights, and have none of these restrictions."
)


def render(payload, page, figures):
    """Write the markdown page and its PNG figures from a results payload."""
    page, figures = Path(page), Path(figures)
    figures.mkdir(parents=True, exist_ok=True)
    meta, rows = payload["meta"], payload["rows"]
    env = meta["environment"]
    lines = [
        "# Comparison with other clustering methods",
        "",
        "<!-- Generated by benchmarks/run.py from benchmarks/results/comparison.json; do not edit. -->",
        "",
        "AttentionClustering against KMeans, MiniBatchKMeans, GaussianMixture and "
        "SpectralClustering, on the same data in the same process, after Numba has compiled. "
        "All methods run with their default settings and ``random_state=0``; "
        f"SpectralClustering (k-nearest-neighbour affinity) only for n <= {meta['spectral_max_n']}. "
        "*Fit time* is the median warm wall time of ``fit_predict(X)``, the methods timed in "
        "interleaved rounds; *peak memory* is the tracemalloc peak during one fit, above the "
        "memory in use before it (so the data themselves are not counted): it counts NumPy "
        "arrays and Python objects"
        + (
            ", and Numba's arrays too (checked at run time: they go through a traced allocator)"
            if meta["numba_allocations_traced"]
            else ", but not Numba's arrays (checked at run time: its allocator is not traced)"
        )
        + ", and not BLAS or OpenMP work buffers.",
        "",
        "Produced by:",
        "",
    ]
    if meta["mode"] != "full":
        lines[-2:-2] = [
            f"> These numbers come from the *{meta['mode']}* mode of `benchmarks/run.py`: a smaller "
            "grid, smaller sizes and a shorter time budget than the full run (`make bench`). "
            "The commands below reproduce them.",
            "",
        ]
    for section in sorted(meta["sections"], key=PAGE_ORDER.index):
        info = meta["sections"][section]
        lines.append(
            f"- {section}: ``{info['command']}`` on {info['date']}, {info['seconds'] / 60:.1f} min "
            f"(time budget {info['budget']:g} s per fit, up to {info['repeats']} timing rounds); "
            f"load average (1, 5, 15 min) {load_numbers(info['load_before'])} before, "
            f"{load_numbers(info['load_after'])} after (2 cores)."
        )
    pools = ", ".join(f"{p['internal_api']} x{p['num_threads']}" for p in env["thread_pools"])
    lines += [
        "",
        f"Environment: Python {env['python']}, NumPy {env['numpy']}, SciPy {env['scipy']}, "
        f"scikit-learn {env['scikit-learn']}, Numba {env['numba']}, attention_cluster "
        f"{env['attention_cluster']}; {env['cpus']} CPUs ({env['machine']}); thread pools: {pools}. "
        f"AttentionClustering solvers: {', '.join(meta['solvers'])}"
        + "; InContextQuantizer -> KMeans included.",
        "",
        "Methods: "
        + ", ".join(f"{short(m)} = ``{m}``" for m in methods_in(rows) if short(m) != m)
        + ". "
        'At its default ``refine="auto"`` AttentionClustering follows the exact solver (AC full) '
        "with the EM refinement of math.md section 7 and leaves PSGD's heads (AC psgd) as they are.",
        "",
    ]
    losses = []
    by_section = defaultdict(list)
    for r in rows:
        by_section[r["section"]].append(r)
    if by_section["synthetic"]:
        synthetic_section(by_section["synthetic"], figures, lines, losses)
    if by_section["scaling"]:
        scaling_section(by_section["scaling"], figures, lines)
    if by_section["cold_start"]:
        lines.append("## Compile time\n")
        lines.append(
            "A fresh process with an empty Numba cache, fitting n=1000, d=10, K=2: the first fit "
            "compiles the kernels it runs; the compile time is that fit minus a warm fit of the "
            "same data. Data this small (fewer than 2^18 numbers) runs NumPy forms of the full "
            "solver's kernels, which need no compile (the performance page's \"Cold start\" "
            "measures a first fit on both sides of that size); PSGD's kernels are compiled at any "
            "size. With the on-disk cache (the default), later processes load the compiled "
            "kernels instead.\n"
        )
        body = [
            [
                short(r["method"]),
                fmt_time(r["import_s"]),
                fmt_time(r["first_fit_s"]),
                fmt_time(r["warm_fit_s"]),
                fmt_time(r["compile_s"]),
            ]
            for r in by_section["cold_start"]
        ]
        lines.append(table(["method", "import", "first fit", "warm fit", "compile"], body) + "\n")
    if by_section["real"]:
        real_section(by_section["real"], figures, lines, losses)
    lines.append("## Where AttentionClustering loses, and why\n")
    lines.append(ASSUMPTIONS + "\n")
    if losses:
        lines.append(f"Measured losses of more than {LOSS} ARI:\n")
        lines += [f"- {loss}" for loss in losses]
    else:
        lines.append(f"No loss of more than {LOSS} ARI was measured in this run.")
    lines.append("")
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join(lines) + "\n")
    return page
