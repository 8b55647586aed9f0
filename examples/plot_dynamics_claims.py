"""
Clusters emerging in self-attention dynamics (companion paper)
==============================================================

The companion paper (Geshkovski, Letrouit, Polyanskiy and Rigollet, "The
emergence of clusters in self-attention dynamics", NeurIPS 2023) and its
sphere variant (Geshkovski et al., "A mathematical perspective on
transformers") state where tokens moved by self-attention end up. This
script integrates the flows of ``docs/math.md`` section 8 with
:func:`attention_cluster.attention_flow` in the authors' setups (their
public simulation code: ``clustering-Tformers.py`` and ``sphere.py``) and
measures each statement over 10 random starts:

- unnormalised, V = I: the rescaled tokens go to the vertices of a convex
  polytope, and the tokens there (the leaders) attend to themselves;
- unnormalised, V with a simple positive top eigenvalue (the authors'
  entrywise-positive random V): tokens go to at most three parallel
  hyperplanes;
- unnormalised, V = -I: one cluster at the origin;
- d = 1: the attention matrix converges to a Boolean matrix of low rank;
- on the sphere, d = 3: one cluster in the end, after metastable
  multi-cluster phases that last longer as beta grows, the energy rising.

Explicit Euler steps replace the authors' Runge-Kutta 4 (attention frozen
during a step in their code as well); the step and horizon are given below.
"""

# %%
# The flows
# ---------

import _figures as F
import matplotlib.pyplot as plt
import numpy as np
from scipy.spatial import ConvexHull

from attention_cluster import SelfAttentionDynamics, attention_flow

timer = F.Timer()
N_RUNS = 3 if F.quick() else 10
N_TOKENS = 20  # the authors' clustering-Tformers.py
DT = 0.1  # the authors' step; their horizon t = 5 leaves the hyperplanes unsettled, so t = 10
T = 10.0
STEPS = int(T / DT)
T_NEGATIVE = 100.0  # V = -I: the tokens reach the origin slowly (about 1 / t)
BETA = 1.0  # the authors' logits <Q x_i, K x_j>, without an inverse temperature


def limit_points(Z, tol=1e-2):
    """Distinct points of Z (groups closer than tol times the spread)."""
    scale = max(np.abs(Z).max(), 1e-300)
    points = []
    for z in Z:
        if not any(np.linalg.norm(z - p) <= tol * scale for p in points):
            points.append(z)
    return np.array(points)


def polytope_run(seed):
    X = np.random.default_rng(seed).uniform(-5, 5, (N_TOKENS, 2))
    # One beta for the flow and the fit: the leaders are those of the limit points.
    path = attention_flow(X, STEPS, model="unnormalized", beta=BETA, step_size=DT)
    model = SelfAttentionDynamics(
        model="unnormalized", beta=BETA, step_size=DT, max_iter=STEPS, stopping="horizon"
    ).fit(X)
    points = limit_points(path[-1])
    vertices = len(ConvexHull(points).vertices) if len(points) >= 3 else len(points)
    moved = np.linalg.norm(path[-1] - path[-2], axis=1).max() / DT
    scale = np.abs(path[-1]).max()
    held = int(
        sum(
            np.min(np.linalg.norm(path[-1][model.leaders_] - p, axis=1)) <= 1e-2 * scale
            for p in points
        )
    )
    return dict(
        path=path,
        n_points=len(points),
        n_vertices=vertices,
        n_leaders=len(model.leaders_),
        held=held,
        leaders=model.leaders_,
        labels=model.labels_,
        speed=moved,
    )


polytope = [polytope_run(s) for s in range(N_RUNS)]


def hyperplane_run(seed):
    rng = np.random.default_rng(seed)
    V = np.abs(rng.random((2, 2)))  # Perron-Frobenius: simple positive top eigenvalue
    X = rng.uniform(-5, 5, (N_TOKENS, 2))
    path = attention_flow(X, STEPS, model="unnormalized", step_size=DT, value=V)
    eigvals, left = np.linalg.eig(V.T)
    w = np.real(left[:, np.argmax(np.real(eigvals))])
    coords = path[-1] @ w  # the coefficient along phi_1 (up to a constant factor)
    levels = limit_points(coords[:, None])
    return dict(path=path, n_levels=len(levels), V=V)


hyperplanes = [hyperplane_run(s) for s in range(N_RUNS)]


def negative_run(seed):
    X = np.random.default_rng(seed).uniform(-5, 5, (N_TOKENS, 2))
    path = attention_flow(
        X, int(T_NEGATIVE / DT), model="unnormalized", step_size=DT, value=-np.eye(2)
    )
    times = np.array([T, T_NEGATIVE])
    Xt = path[(times / DT).astype(int)] * np.exp(-times)[:, None, None]  # x = exp(tV) z
    return dict(
        norm_ratio=np.linalg.norm(Xt, axis=2).max(axis=1) / np.linalg.norm(X, axis=1).max(),
        diameter_ratio=np.ptp(Xt[-1], axis=0).max() / np.ptp(X, axis=0).max(),
    )


negative = [negative_run(s) for s in range(N_RUNS)]


def boolean_run(seed):
    X = np.random.default_rng(seed).uniform(-1, 1, (N_TOKENS, 1))
    path = attention_flow(X, int(10 / DT), model="unnormalized", step_size=DT)
    Xt = path[-1] * np.exp(10.0)
    logits = Xt @ Xt.T
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    gap = float(np.max(np.minimum(P, 1 - P)))
    return dict(gap=gap, rank=int(np.linalg.matrix_rank(np.round(P))))


boolean = [boolean_run(s) for s in range(N_RUNS)]

# %%
# On the sphere: one cluster in the end, after metastable phases
# ----------------------------------------------------------------
# The authors' ``sphere.py``: n = 64 tokens uniform on S^2, Euler step 0.1
# then renormalisation. Clusters are counted as in their
# ``phase-diagrams.py`` (<x_i, x_j> > 0.9999, a chordal distance of 0.014).

SPHERE_N, SPHERE_DT = 64, 0.1
BETAS = (1.0, 4.0, 9.0) if F.quick() else (1.0, 4.0, 9.0, 16.0)
HORIZON = 300.0 if F.quick() else 1000.0


def sphere_run(seed, beta, model="sa", dt=SPHERE_DT, horizon=HORIZON):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((SPHERE_N, 3))
    est = SelfAttentionDynamics(
        model=model,
        beta=beta,
        step_size=dt,
        max_iter=int(horizon / dt),
        stopping="horizon",
        cluster_tol=0.014,
        min_cluster_size=1,
    )
    est.fit(X)
    counts = est.n_clusters_path_
    one = np.flatnonzero(counts == 1)
    return dict(
        counts=counts,
        energy=est.energy_path_,
        final=int(counts[-1]),
        time_to_one=float(one[0] * SPHERE_DT) if one.size else np.inf,
    )


sphere = {beta: [sphere_run(s, beta) for s in range(N_RUNS)] for beta in BETAS}
# The energy claim is about the flow: at beta = 4 USA's speed reaches e^4 / n
# times the softmax's, and Euler steps of 0.1 overshoot, so steps of 0.01.
usa = [sphere_run(s, 4.0, model="usa", dt=0.01, horizon=10.0) for s in range(N_RUNS)]

# %%
# Trajectories
# ------------
# Left: the unnormalised flow with V = I in the plane (rescaled tokens),
# the limit polytope and its leaders. Middle: the SA flow on the sphere
# S^2 (beta = 4), coloured by the final cluster of a stop at t = 10. Right:
# the number of clusters on the sphere along time for each beta (medians).

fig = plt.figure(figsize=(15, 4.6), layout="constrained")
ax = fig.add_subplot(1, 3, 1)
r = polytope[0]
colors = plt.cm.tab10(r["labels"] % 10)
for i in range(N_TOKENS):
    ax.plot(r["path"][:, i, 0], r["path"][:, i, 1], color=colors[i], linewidth=0.8)
ax.scatter(*r["path"][0].T, c="white", edgecolors=colors, s=20, zorder=3, label="start")
pts = limit_points(r["path"][-1])
if len(pts) >= 3:
    hull = ConvexHull(pts)
    for simplex in hull.simplices:
        ax.plot(pts[simplex, 0], pts[simplex, 1], "k:", linewidth=0.8)
ax.scatter(*r["path"][0][r["leaders"]].T, marker="*", s=160, c="k", zorder=4, label="leaders")
ax.set_aspect("equal")
ax.legend(fontsize="small")
ax.set_title("unnormalised, V = I: rescaled tokens z(t)")

ax = fig.add_subplot(1, 3, 2, projection="3d")
X0 = np.random.default_rng(0).standard_normal((SPHERE_N, 3))
path3 = attention_flow(X0, 100, beta=4.0, step_size=SPHERE_DT)
labels3 = (
    SelfAttentionDynamics(
        beta=4.0,
        step_size=SPHERE_DT,
        max_iter=100,
        stopping="horizon",
        cluster_tol=0.05,
        min_cluster_size=1,
    )
    .fit(X0)
    .labels_
)
colors = plt.cm.tab10(labels3 % 10)
for i in range(SPHERE_N):
    ax.plot(*path3[:, i].T, color=colors[i], linewidth=0.7)
ax.scatter(*path3[-1].T, c=colors, s=25)
ax.set_title("SA on the sphere, beta = 4, t in [0, 10]")
ax.set_axis_off()

ax = fig.add_subplot(1, 3, 3)
for beta in BETAS:
    counts = np.median([run["counts"] for run in sphere[beta]], axis=0)
    ax.plot(np.arange(len(counts)) * SPHERE_DT, counts, label=f"beta = {beta:g}")
ax.set_xscale("symlog", linthresh=1)
ax.set_yscale("log")
ax.set_xlabel("t")
ax.set_ylabel("clusters (median over runs)")
ax.legend(fontsize="small")
ax.set_title("SA on S^2: metastable plateaus")

# %%
# Claims
# ------

n_points = [r["n_points"] for r in polytope]
n_vertices = [r["n_vertices"] for r in polytope]
n_leaders = [r["n_leaders"] for r in polytope]
held = [r["held"] for r in polytope]
levels = [r["n_levels"] for r in hyperplanes]
gaps = [r["gap"] for r in boolean]
ranks = [r["rank"] for r in boolean]
finals = {beta: [r["final"] for r in sphere[beta]] for beta in BETAS}
t_one = {beta: np.array([r["time_to_one"] for r in sphere[beta]]) for beta in BETAS}
med_t = [float(np.median(t_one[b])) for b in BETAS]


def increasing(times):
    """Strictly increasing where finite, infinite (beyond the horizon) only at the end."""
    finite = [t for t in times if np.isfinite(t)]
    return finite == times[: len(finite)] and all(np.diff(finite) > 0)


energy_rises = [bool(np.all(np.diff(r["energy"]) >= -1e-9 * np.abs(r["energy"][1:]))) for r in usa]
source = "companion"
claims = [
    F.claim(
        "dyn-polytope",
        source,
        f"Unnormalised, V = I (Q = K = I), d = 2, n = {N_TOKENS}, t = {T:g}: rescaled tokens go to the vertices of "
        "a convex polytope, each held by a leader",
        "z_i(t) converge to the vertices of a convex polytope; the tokens there are leaders",
        f"limit points per run {n_points}, of which hull vertices {n_vertices}, holding a leader (self-attention "
        f"> 1/2) {held}; leaders {n_leaders}; largest speed at t = {T:g}: "
        f"{F.fmt(max(r['speed'] for r in polytope))}",
        n_points == n_vertices and held == n_points,
        "in every run every limit point is a vertex of their convex hull and holds a leader",
    ),
    F.claim(
        "dyn-hyperplanes",
        source,
        "Unnormalised, V entrywise positive (simple positive top eigenvalue), d = 2: at most three parallel "
        "hyperplanes",
        "tokens go to at most three parallel hyperplanes",
        f"distinct values of the coefficient along the top eigenvector at t = {T:g}: {levels}",
        max(levels) <= 3,
        "at most 3 levels (groups within 1 % of the range) in every run",
    ),
    F.claim(
        "dyn-negative",
        source,
        "Unnormalised, V = -I, d = 2: one cluster at the origin",
        "all tokens go to the origin",
        f"largest |x_i(t)| / largest |x_i(0)| (worst run): {F.fmt(max(r['norm_ratio'][0] for r in negative))} at "
        f"t = {T:g}, {F.fmt(max(r['norm_ratio'][1] for r in negative))} at t = {T_NEGATIVE:g}; diameter ratio "
        f"{F.fmt(max(r['diameter_ratio'] for r in negative))} at t = {T_NEGATIVE:g}",
        max(r["norm_ratio"][1] for r in negative) < 0.05,
        f"every token within 5 % of the initial largest norm at t = {T_NEGATIVE:g} in every run",
        "The approach is slow, about 1 / t: near the origin the attention flattens, and a uniform attention "
        "moves all tokens alike (x_i' = -mean), so only the softmax's remaining contrast shrinks the cluster.",
    ),
    F.claim(
        "dyn-boolean",
        source,
        f"d = 1, V = Q = K = 1, n = {N_TOKENS}, t = 10: the attention matrix converges to a low-rank Boolean matrix",
        "P(t) converges to a Boolean matrix of low rank",
        f"largest min(P_ij, 1 - P_ij) per run up to {F.fmt(max(gaps))}; rank of the rounded matrix {sorted(set(ranks))}",
        max(gaps) < 1e-3 and max(ranks) <= 2,
        "entries within 1e-3 of 0 or 1 and rank at most 2 in every run",
    ),
    F.claim(
        "dyn-one-cluster",
        source,
        f"SA on S^2, n = {SPHERE_N}: one cluster in the end, for beta in {list(BETAS)} (horizon t = {HORIZON:g})",
        "all tokens end in one cluster (d >= 3, any beta > 0)",
        "; ".join(f"beta = {b:g}: final clusters {sorted(set(finals[b]))}" for b in BETAS),
        all(f == 1 for b in BETAS for f in finals[b]),
        "one cluster at the horizon in every run",
        "Where it fails it is the horizon: the time to one cluster grows quickly with beta (next row).",
    ),
    F.claim(
        "dyn-metastable",
        source,
        "SA on S^2: multi-cluster phases last longer as beta grows",
        "metastable multi-cluster states, exponentially long in beta",
        "median time to one cluster: "
        + ", ".join(
            f"{t:.1f} (beta = {b:g})" if np.isfinite(t) else f"beyond the horizon (beta = {b:g})"
            for b, t in zip(BETAS, med_t)
        ),
        increasing(med_t),
        "the median time to one cluster increases with beta (a median beyond the horizon counts as longer "
        "than any reached, and several beyond it as tied)",
        "Exponential growth is not tested: at n = 64 the times grow but the horizon caps the largest betas.",
    ),
    F.claim(
        "dyn-energy",
        source,
        "USA on S^2 (beta = 4): the interaction energy E_beta increases along the flow",
        "E_beta increases along USA",
        f"non-decreasing in {sum(energy_rises)} of {len(energy_rises)} runs",
        all(energy_rises),
        "non-decreasing (to 1e-9 relative) at every step of every run",
    ),
]

F.finish(
    "dynamics_claims",
    fig,
    {
        "title": "Clusters emerging in self-attention dynamics (companion paper)",
        "settings": dict(
            n_runs=N_RUNS,
            n_tokens=N_TOKENS,
            dt=DT,
            horizon=T,
            sphere_n=SPHERE_N,
            sphere_dt=SPHERE_DT,
            betas=BETAS,
            sphere_horizon=HORIZON,
        ),
        "claims": claims,
        "data": dict(
            limit_points=n_points,
            hull_vertices=n_vertices,
            leaders=n_leaders,
            levels=levels,
            boolean_gap=gaps,
            boolean_rank=ranks,
            sphere_final=finals,
            time_to_one={str(b): t_one[b].tolist() for b in BETAS},
        ),
    },
    timer,
)
