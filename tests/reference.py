"""Slow, obviously correct NumPy twins of the Numba kernels.

Each function is written from ``math.md`` directly, with the L x L
attention matrix spelled out where that is the plainest form.
"""

import numpy as np

MASK = (1 << 64) - 1


def linear_layer(X, U, temperature):
    """T(X)_l = (lambda K / L) sum_h sum_k <X_l, mu_h><mu_h, X_k> X_k (math.md section 2)."""
    L = X.shape[0]
    K = U.shape[1]
    scores = sum(np.outer(X @ U[:, h], X @ U[:, h]) for h in range(K))  # L x L
    return (temperature * K / L) * scores @ X


def sequence_loss(X, U, temperature):
    """(1/L) ||X - T(X)||_F^2."""
    return np.sum((X - linear_layer(X, U, temperature)) ** 2) / X.shape[0]


def sequence_grad(X, U, temperature):
    """(2c/L) X^T (E G + X (E^T A)) (math.md section 3)."""
    L = X.shape[0]
    c = temperature * U.shape[1] / L
    A = X @ U
    G = X.T @ A
    E = c * A @ G.T - X
    return (2 * c / L) * X.T @ (E @ G + X @ (E.T @ A))


def regularizer(X, U, kind):
    """Pairwise sum_{j<k} mean <mu_j,x>^2 <mu_k,x>^2, or product mean prod_k <mu_k,x>^2."""
    A2 = (X @ U) ** 2
    K = U.shape[1]
    if kind == "pairwise":
        return sum(np.mean(A2[:, j] * A2[:, k]) for j in range(K) for k in range(j + 1, K))
    return np.mean(np.prod(A2, axis=1))


# Step of finite_difference.
FD_STEP = 1e-6


def finite_difference(f, U, eps=FD_STEP):
    """Central finite-difference gradient of a scalar function of U."""
    G = np.zeros_like(U)
    for idx in np.ndindex(U.shape):
        E = np.zeros_like(U)
        E[idx] = eps
        G[idx] = (f(U + E) - f(U - E)) / (2 * eps)
    return G


def finite_difference_rounding(value, eps=FD_STEP):
    """A bound on the rounding of :func:`finite_difference` where f is about ``value``.

    Each quotient rounds to about ``eps_machine |f| / eps``, whatever the
    gradient's size: a large f (a loss of thousands) makes it larger than a
    fixed atol. Four times that, beside the truncation's error.
    """
    return 4 * np.finfo(np.float64).eps * abs(value) / eps


class XorShift:
    """Python twin of the kernels' xorshift64* generator."""

    def __init__(self, state):
        self.state = int(state)

    def next_uint(self):
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & MASK
        x ^= x >> 27
        self.state = x
        return ((x * 0x2545F4914F6CDD1D) & MASK) >> 11

    def draw_index(self, cum_weights):
        u = self.next_uint() * (1.0 / 9007199254740992.0) * cum_weights[-1]
        return int(np.searchsorted(cum_weights, u, side="right"))


def psgd_steps(
    X, cum_weights, U, inv_scale, temperature, L, batch, steps, kind, rho, riemannian, state
):
    """PSGD of math.md section 3 with explicit L x L attention, step by step."""
    rng = XorShift(state)
    U = U.copy()
    losses = []
    for step in steps:
        grad = np.zeros_like(U)
        loss = 0.0
        tokens = []
        for _ in range(batch):
            idx = [rng.draw_index(cum_weights) for _ in range(L)]
            Xs = X[idx].astype(np.float64) * inv_scale
            tokens.append(Xs)
            loss += sequence_loss(Xs, U, temperature)
            grad += sequence_grad(Xs, U, temperature)
        T = np.vstack(tokens)
        if kind is not None:
            loss += rho * batch * regularizer(T, U, kind)
            grad += rho * batch * finite_difference(lambda V: regularizer(T, V, kind), U)  # noqa: B023 (called here)
        grad /= batch
        losses.append(loss / batch)
        if riemannian:
            grad = grad - U * np.sum(U * grad, axis=0)
        V = U - step * grad
        U = V / np.linalg.norm(V, axis=0)
    return U, np.array(losses)


def head_signs(X, heads, weights=None):
    """Signs of the heads: the points each wins (sign-free) project positively."""
    proj = X @ heads.T
    owner = np.argmax(np.abs(proj), axis=1)
    w = np.ones(len(X)) if weights is None else weights
    totals = np.array([np.sum(w[owner == h] * proj[owner == h, h]) for h in range(len(heads))])
    return np.where(totals < 0, -1.0, 1.0)


def mixture_log_likelihood(X, weights, U, pi, radius, tau):
    """Weighted mean of log sum_k pi_k N(x; r_k mu_k, tau^2 I), by scipy (math.md section 7).

    ``radius`` is the common norm r or the K norms r_k.
    """
    from scipy.special import logsumexp
    from scipy.stats import multivariate_normal

    d, K = U.shape
    radii = np.broadcast_to(radius, (K,))
    logs = np.column_stack(
        [
            np.log(pi[k]) + multivariate_normal(radii[k] * U[:, k], tau**2 * np.eye(d)).logpdf(X)
            for k in range(K)
        ]
    )
    w = np.ones(len(X)) if weights is None else weights
    return float(np.sum(w * logsumexp(logs, axis=1)) / np.sum(w))


def mixture_e_step(X, U, log_pi, beta, weights=None):
    """Responsibilities softmax_k(log pi_k + beta <mu_k, x>); (S, counts, partial)."""
    from scipy.special import logsumexp

    logits = log_pi + beta * (X @ U)
    norm = logsumexp(logits, axis=1)
    gamma = np.exp(logits - norm[:, None])
    w = np.ones(len(X)) if weights is None else weights
    return (gamma * w[:, None]).T @ X, gamma.T @ w, float(np.sum(w * norm))


def mixture_em_step(X, weights, U, pi, radius, tau, free=False):
    """One EM step written as the maximiser of the expected complete log-likelihood.

    ``radius``: the common norm r, or the K norms r_k; ``free``: the M step
    gives each centroid its own norm.
    """
    from scipy.special import softmax

    w = np.ones(len(X)) if weights is None else weights
    N = np.sum(w)
    K = U.shape[1]
    radii = np.broadcast_to(radius, (K,))
    # Posterior of N(r_k mu_k, tau^2 I) with weights pi, written out.
    sq_in = np.stack([np.sum((X - radii[k] * U[:, k]) ** 2, axis=1) for k in range(K)], axis=1)
    gamma_w = softmax(np.log(pi) - sq_in / (2 * tau**2), axis=1) * w[:, None]
    S, counts = gamma_w.T @ X, gamma_w.sum(axis=0)
    new_U = (S / np.linalg.norm(S, axis=1, keepdims=True)).T
    # r (or r_k) maximises sum_ik g_ik (r_k <mu_k, x_i> - r_k^2 / 2).
    along = gamma_w * (X @ new_U)
    new_r = along.sum(axis=0) / counts if free else np.full(K, np.sum(along) / N)
    sq = np.stack([np.sum((X - new_r[k] * new_U[:, k]) ** 2, axis=1) for k in range(K)], axis=1)
    new_tau2 = np.sum(gamma_w * sq) / (N * X.shape[1])
    return new_U, counts / N, new_r, np.sqrt(new_tau2)


def attention_rows(queries, keys, values, key_bias, beta):
    """sum_j P_ij v_j and log Z_i, P_ij = exp(b_j + beta <q_i, k_j>) / Z_i (math.md section 8)."""
    logits = key_bias[None, :] + beta * queries.astype(np.float64) @ keys.astype(np.float64).T
    weights = np.exp(logits)
    Z = weights.sum(axis=1)
    return (weights @ values) / Z[:, None], np.log(Z)


def group_tokens(X, radius):
    """Token i joins the first group whose first token is within radius, else starts one."""
    firsts, labels = [], []
    for x in X:
        for g, f in enumerate(firsts):
            if np.linalg.norm(x - X[f]) <= radius:
                labels.append(g)
                break
        else:
            labels.append(len(firsts))
            firsts.append(len(labels) - 1)
    return np.array(labels), len(firsts)


def sphere_euler_step(X, beta, step_sizes, normalised=True):
    """x_i + h_i P_perp(x_i) m_i, renormalised; m_i the softmax (SA) or 1/n (USA) mean."""
    W = np.exp(beta * X @ X.T)
    Z = W.sum(axis=1) if normalised else np.full(X.shape[0], X.shape[0])
    M = (W @ X) / Z[:, None]
    tangent = M - np.sum(M * X, axis=1, keepdims=True) * X
    Y = X + np.asarray(step_sizes).reshape(-1, 1) * tangent
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def online_em(batches, U, pi, radius, tau, inv_scale, alpha, gain, significance=0.01):
    """Online EM (Cappe and Moulines 2009) written out, unweighted batches.

    s_n = s_{n-1} + min(1, g |B_n| / N_n)^alpha (sbar_n(theta_{n-1}) - s_{n-1})
    on s = (S / N, counts / N); theta_n the M step of math.md section 7 at
    s_n with m2 the exact running mean of ||x / s||^2; returns the heads of
    the M step at the plain average of the s_n. A batch whose shares c of
    the components fail Pearson's test against the running mean rho of the
    earlier batches' shares (n / (1 + n / N) times the effect, N the earlier
    rows, rare components pooled), with an effect above 0.1 (math.md section
    7, "A batch that is not a sample of the stream"), moves the weights as a
    running mean and each component's mean row by its part of the
    component's weight seen, the average likewise per component; so does
    every batch once the refused batches lacking a cluster pass their
    binomial tail of 1e-4.
    """
    from scipy.stats import binom, chi2

    d, K = U.shape
    s = [np.zeros((K, d)), np.zeros(K)]
    avg = [np.zeros((K, d)), np.zeros(K)]
    rho = np.zeros(K)
    seen, sum_sq, averaged_weight = 0, 0.0, 0.0
    tested, refusals, ordered = 0, 0, False
    for n, X in enumerate(batches, start=1):
        X = np.asarray(X, dtype=np.float64) * inv_scale
        earlier, seen = seen, seen + len(X)
        sum_sq += float(np.sum(X**2))
        m2 = sum_sq / seen
        S, counts, _ = mixture_e_step(X, U, np.log(pi), radius / tau**2)
        c = counts / len(X)
        gamma = min(1.0, gain * len(X) / seen) ** alpha
        refused = ordered
        if n > 1 and not ordered:
            tested += 1
            effect = np.sum((c - rho) ** 2 / rho)
            # Components expected fewer than 5 times pooled.
            rare = len(X) * rho < 5.0
            cats_c = np.append(c[~rare], c[rare].sum()) if rare.any() else c
            cats_p = np.append(rho[~rare], rho[rare].sum()) if rare.any() else rho
            pearson = len(X) / (1.0 + len(X) / earlier) * np.sum((cats_c - cats_p) ** 2 / cats_p)
            refused = bool(
                effect > 0.1
                and cats_p.size > 1
                and pearson > chi2.isf(significance, cats_p.size - 1)
            )
            # Counted towards an ordered stream: a refused batch lacking a
            # cluster (below a tenth of its share, expected 5 times or more).
            if refused and np.any((len(X) * rho >= 5.0) & (c < 0.1 * rho)):
                refusals += 1
                ordered = binom.sf(refusals - 1, tested, significance) < 1e-4
        rho = rho + len(X) / seen * (c - rho)
        if refused:
            weights = s[1] + len(X) / seen * (c - s[1])
            mean = s[0] / s[1][:, None]
            mean = mean + (counts / (weights * seen))[:, None] * (S / counts[:, None] - mean)
            mean_avg = avg[0] / avg[1][:, None]
            rate = counts / (avg[1] * averaged_weight + counts)
            mean_avg = mean_avg + rate[:, None] * (mean - mean_avg)
            avg_weights = avg[1] + len(X) / seen * (c - avg[1])
            s = [weights[:, None] * mean, weights]
            avg = [avg_weights[:, None] * mean_avg, avg_weights]
        else:
            s = [s[0] + gamma * (S / len(X) - s[0]), s[1] + gamma * (c - s[1])]
            avg = [a + (v - a) * len(X) / (averaged_weight + len(X)) for a, v in zip(avg, s)]
        averaged_weight += len(X)
        U = (s[0] / np.linalg.norm(s[0], axis=1, keepdims=True)).T
        radius = float(np.sum(np.linalg.norm(s[0], axis=1)))
        tau = np.sqrt((m2 - radius**2) / d)
        pi = s[1]
    return avg[0] / np.linalg.norm(avg[0], axis=1, keepdims=True)


def lbfgs_direction(g, S, Y):
    """-H g with H the BFGS inverse-Hessian updates of gamma I by the pairs, as matrices.

    H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T for each pair, oldest
    first, rho = 1 / <s, y>, gamma = <s, y> / <y, y> of the newest pair
    (Nocedal and Wright, Numerical Optimization, equation 7.19).
    """
    p = g.size
    H = (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1]) * np.eye(p)
    for s, y in zip(S, Y):
        rho = 1.0 / (s @ y)
        V = np.eye(p) - rho * np.outer(y, s)
        H = V.T @ H @ V + rho * np.outer(s, s)
    return -H @ g


def mixture_vector(U, radii, tau2, pi, free=False):
    """The EM refinement's parameter vector (heads, r, log tau^2, log pi) of math.md
    section 7 ("Subsample, then Newton's steps"): the common norm r once, or the
    K norms r_k when they are free."""
    radii = np.broadcast_to(np.asarray(radii, dtype=np.float64), (U.shape[1],))
    return np.concatenate([U.ravel(), radii if free else radii[:1], [np.log(tau2)], np.log(pi)])


def mixture_from_vector(v, d, K, free=False):
    """(U, radii, tau^2, pi) of a parameter vector (:func:`mixture_vector`): each head
    normalised onto its sphere, tau^2 = exp(log tau^2), pi = softmax(log pi)."""
    from scipy.special import softmax

    m = K if free else 1
    U = v[: d * K].reshape(d, K)
    U = U / np.linalg.norm(U, axis=0)
    radii = np.broadcast_to(v[d * K : d * K + m], (K,)).copy()
    return U, radii, float(np.exp(v[d * K + m])), softmax(v[d * K + m + 1 :])


def squarem_point(v0, v1, v2, step_max):
    """SQUAREM's extrapolated point from two EM steps v0 -> v1 -> v2, and its step length.

    Varadhan and Roland (Scand. J. Stat. 35, 2008), scheme SqS3: r = v1 -
    v0, v = v2 - 2 v1 + v0, alpha = -||r|| / ||v||, its length taken at
    least 1 (never shorter than two EM steps) and at most ``step_max`` (the
    SQUAREM package's step-length control, Du and Varadhan, J. Stat. Softw.
    92(7), 2020), and the point is v0 - 2 alpha r + alpha^2 v (math.md
    section 7: "accelerated by SQUAREM"). Returns ``(point, length)``.
    """
    r, v = v1 - v0, v2 - 2.0 * v1 + v0
    length = min(max(np.linalg.norm(r) / np.linalg.norm(v), 1.0), step_max)
    return v0 + 2.0 * length * r + length**2 * v, length


def online_em_step_sizes(batch_weights, alpha, gain, eta):
    """Step sizes gamma_n and averaging weights omega_n of online EM over batches of weights W_b.

    math.md section 7 ("One pass over a stream"; Cappe and Moulines, J. R.
    Stat. Soc. B 71, 2009): gamma_n = min(1, g / n)^alpha for equal batches,
    in general min(1, g W_b / W_n)^alpha with W_n the weight seen after batch
    n; the published statistics average the s_n with weights omega_n =
    W_b W_n^eta (Polyak-Ruppert, eta = 0: the batches' weights).
    """
    W = np.cumsum(np.asarray(batch_weights, dtype=np.float64))
    b = np.asarray(batch_weights, dtype=np.float64)
    return np.minimum(1.0, gain * b / W) ** alpha, b * W**eta


def psgd_step_sizes(learning_rate, temperature, n_clusters, trace, n_steps, decay=200.0):
    """The estimator's PSGD steps gamma_t = eta / (lambda K tr(M) (1 + t / decay)), t = 0, 1, ...

    The step of math.md section 3, scaled by the risk's curvature scale
    ``lambda K tr(M)`` (M the second moment of the data at unit scale) and
    decaying as ``1 + t / 200``, as ``AttentionClustering``'s
    ``learning_rate`` documentation states.
    """
    t = np.arange(n_steps, dtype=np.float64)
    return learning_rate / (temperature * n_clusters * trace * (1.0 + t / decay))


def mixture_fourth_moment(A, centroids, weights, noise):
    """E[(x^T A x) x x^T] for the mixture of math.md section 1, A symmetric.

    Isserlis' theorem for x = m + e, e ~ N(0, s I), s = sigma^2: the odd
    moments of e vanish and E[(e^T A e) e e^T] = s^2 (tr(A) I + 2 A), so

        E_m = (m^T A m + s tr A)(m m^T + s I) + 2 s (m m^T A + A m m^T) + 2 s^2 A,

    averaged over the components with their weights.
    """
    s = noise**2
    eye = np.eye(centroids.shape[1])
    total = np.zeros_like(eye)
    for w, m in zip(weights, centroids):
        mm = np.outer(m, m)
        total += w * (
            (m @ A @ m + s * np.trace(A)) * (mm + s * eye)
            + 2.0 * s * (mm @ A + A @ mm)
            + 2.0 * s**2 * A
        )
    return total


def population_pgd_steps(U0, centroids, weights, noise, temperature, n_steps, rho=0.0, step=None):
    """Population PGD at L = infinity (math.md section 3), step by step; ``(U, gamma, objective)``.

    As L -> infinity the layer is T(x) = a M P x, a = lambda K, P = U U^T,
    M the mixture's second moment (math.md section 3, "The regulariser's
    strength"), so

        R(P) = tr M - 2 a tr(M^2 P) + a^2 tr(P M^2 P M),
        H = 2 grad_P R = -4 a M^2 + 2 a^2 (M^2 P M + M P M^2),   grad_U R = H U,

    and the pairwise regulariser r = sum_{j<k} E[<mu_j, x>^2 <mu_k, x>^2] has
    grad_{mu_j} r = 2 sum_{k != j} E[<mu_k, x>^2 x x^T] mu_j
    (:func:`mixture_fourth_moment`). Each step g_h = (I - mu_h mu_h^T)
    grad_{mu_h}, mu_h <- normalise(mu_h - gamma g_h); without ``step`` the
    first gamma is 0.5 / (||H||_2 + 2 rho ||N||_2) at U0, N = E[(x^T P x) x
    x^T] (the docstring of theory.population_pgd), and a step that raises
    the objective by more than 1e-12 (|objective| + E||x||^2) is halved, for
    that step and the ones after, until it does not.
    """
    U = U0 / np.linalg.norm(U0, axis=0)
    K = U.shape[1]
    a = temperature * K
    M = (weights * centroids.T) @ centroids + noise**2 * np.eye(centroids.shape[1])
    M2 = M @ M
    quartic = [None] * K

    def objective(U):
        P = U @ U.T
        value = np.trace(M) - 2.0 * a * np.trace(M2 @ P) + a**2 * np.trace(P @ M2 @ P @ M)
        H = -4.0 * a * M2 + 2.0 * a**2 * (M2 @ P @ M + M @ P @ M2)
        grad = H @ U
        if rho:
            for k in range(K):
                quartic[k] = mixture_fourth_moment(
                    np.outer(U[:, k], U[:, k]), centroids, weights, noise
                )
            for j in range(K):
                for k in range(K):
                    if k != j:
                        grad[:, j] += rho * 2.0 * quartic[k] @ U[:, j]
                        if j < k:
                            value += rho * U[:, k] @ quartic[j] @ U[:, k]
        return value, grad, H

    value, grad, H = objective(U)
    if step is None:
        N = mixture_fourth_moment(U @ U.T, centroids, weights, noise)
        step = 0.5 / (np.linalg.norm(H, 2) + 2.0 * rho * np.linalg.norm(N, 2))
    values = [value]
    a0 = np.trace(M)
    for _ in range(n_steps):
        riem = grad - U * np.sum(U * grad, axis=0)
        while True:
            V = U - step * riem
            V = V / np.linalg.norm(V, axis=0)
            new_value, new_grad, _ = objective(V)
            if new_value <= value + 1e-12 * (abs(value) + a0):
                break
            step *= 0.5
        U, value, grad = V, new_value, new_grad
        values.append(value)
    return U, step, np.array(values)
