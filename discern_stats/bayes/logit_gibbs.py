"""Blocked Metropolis-within-Gibbs sampler for hierarchical logistic models.

The model family of the cue-weight model (`discern_stats.bayes.cue_weights`):

    k_c ~ Binomial(n_c, logistic(eta_c)),  eta_c = a_c' theta[l_c] + u[l_c, w_c]
    theta[l, j] ~ N(m_j, s_j)              fixed-prior columns (intercepts, intervention shifts)
    theta[l, j] ~ N(mu_j, tau_j)           pooled columns (the cue weights)
    mu_j ~ N(0, mu_sd),  tau_j ~ Gamma(tau_shape, tau_rate)
    u[l, w] ~ N(0, sigma[l]),  sigma[l] ~ HalfNormal(sigma_sd)

One sweep updates, in turn (each step leaves the posterior invariant, so their composition
does; no step has an integrator, so there are no divergences):

1. theta[l] | u, mu, tau, for every LLM at once: an independence Metropolis-Hastings step
   whose proposal is the Gaussian of one Newton (IWLS) step of the exact conditional,
   N(m, H^-1). Gamerman (1997), "Sampling from the posterior distribution in generalized
   linear mixed models", Statistics and Computing 7:57, proposes IWLS proposals for these
   blocks. Here the step starts from a point fixed for all kept draws (not the current
   value), so the proposal does not depend on the current theta and the acceptance ratio is
   [p(theta') q(theta)] / [p(theta) q(theta')] with q = N(m, H^-1). With thousands of
   choices per LLM the conditional is close to Gaussian: acceptance is high and successive
   draws are close to independent.
   With ``theta_tries`` > 1, every second try is autoregressive instead (preconditioned
   Crank-Nicolson with the same Gaussian as reference; Cotter, Roberts, Stuart & White 2013,
   "MCMC methods for functions", Stat. Sci. 28:424): theta' = m + rho (theta - m) +
   sqrt(1 - rho^2) H^-1/2 z. That kernel is reversible with respect to N(m, H^-1), so its
   acceptance ratio is the independence step's, [p(theta') q(theta)] / [p(theta) q(theta')].
   An independence step alone sticks where the target's tails outweigh the Gaussian's: in the
   53-parameter blocks of the intervention model (acceptance 0.6) runs of up to 40 rejections
   left tail ESS at 163 of 2,000 draws; a local try moves off such points (rho = 0.5: tail ESS
   700, bulk 719; benchmarks/BENCHMARKS.md).
2. u[l, w] | theta, sigma, for every (LLM, world) group at once: the same, in one dimension,
   with Newton steps from 0.
3. A translation move (Liu & Sabatti 2000, "Generalised Gibbs sampler and multigrid Monte
   Carlo", JASA 95:1066): alpha[l, .] + c, u[l, .] - c leaves every eta unchanged (each cell
   has exactly one intercept column), so c | rest is Gaussian, from the priors alone. It
   removes the intercept / mean-world-effect correlation of one-block-at-a-time updates.
4. sigma[l] in both of its parameterisations, interweaved (ASIS; Yu & Meng 2011, JCGS
   20:531): given u (centred: a slice sampler on log sigma; Neal 2003, Ann. Stat. 31:705),
   then given z = u / sigma (non-centred: log p(sigma | z) = loglik(e + sigma z) + log
   prior(sigma), an independence MH step with a Newton proposal as in 1). The centred step
   alone mixes slowly when each world has few choices.
5. mu_j | theta, tau (conjugate normal) and tau_j | theta, mu (slice sampler on log tau).
6. (mu, tau) interweaved (ASIS; Yu & Meng 2011): given z = (theta_pooled - mu) / tau, the
   pooled columns are mu + tau z, and (mu, log tau) | z, rest has log density
   loglik(mu + tau z) + log N(mu; 0, mu_sd) + tau_shape log tau - tau_rate tau (with the
   Jacobian of log tau). An independence MH step updates all of them at once, its proposal the
   Gaussian of one Newton step from a fixed start (as in 1; the curvature of the likelihood
   from the per-LLM curvature in theta by the chain rule, theta_lj = mu_j + e^x_j z_lj). The
   centred step 5 alone stalls when the LLMs barely differ (tau near 0): on 65 groups tau's
   bulk ESS was 69-86 of 2,000 draws. ``interweave_pooled=False`` leaves this step out.

With a structured pooled mean (``mean_X``, ``mean_sd``; `spec.HierarchicalGLM` mean terms) the
pooled columns are theta[l, j] ~ N((X beta)[l, j], tau_j), beta[r, j] ~ N(0, mean_sd[r]), in place of
one mu_j. Steps 5 and 6 then read, with beta in place of mu:

5'. beta[., j] | theta, tau: the conjugate normal regression of the pooled column j on X,
   precision X'X / tau_j^2 + diag(1 / mean_sd^2), mean its inverse times X' theta[., j] / tau_j^2;
   tau_j | theta, beta: the slice sampler of 5 with sum_l (theta_lj - (X beta)_lj)^2.
6'. (beta, log tau) | z = (theta_pooled - X beta) / tau: theta_lj = (X beta)_lj + e^x_j z_lj; the
   same independence MH step as 6 over (beta, x), the curvature by the chain rule
   (d theta_lj / d beta_rj = X_lr), the prior -beta^2 / (2 mean_sd^2) in place of mu's.
   X = a column of ones and mean_sd = mu_sd is the model above (beta = mu).

7. Crossed effects (``crossed_index``; `spec.HierarchicalGLM` crossed, issue 25.2): eta_c gains
   o_c = sum_t v_t[level_t(c)], v_t[j] ~ N(0, sigma_t), sigma_t ~ HalfNormal(sd_t). The distinct
   (LLM, design row) pairs are then keyed by the crossed levels too, so o is one value per pair,
   added to the pair table: every step above is exact given o. Each v_t[j] | rest (the levels of one
   effect are conditionally independent) by an independence MH step per level with the Gaussian of
   ``newton_crossed`` Newton steps from 0 (gradient / curvature summed over the level's cells), then
7b. translations (`crossed_moves`; Liu & Sabatti 2000): the intercepts and the slopes of columns
   constant within the effect's levels (source-level predictors; with their pooled mean) + c,
   v_t - X_t c, and for an effect on the world groups (a shared item effect) u[., j] + c_j,
   v_t[j] - c_j: every eta unchanged, c | rest Gaussian from the priors. Without them the population
   slope slid along v[source] - c x[source] by a random walk (bulk ESS 8 of 800 draws;
   benchmarks/bench_crossed_mixing.py).
7c. sigma_t interweaved (as 4): given v_t by the slice sampler of 4a, then given z_t = v_t / sigma_t
   by an independence MH step with the Gaussian of ``newton_crossed`` Newton steps from a start
   fixed for the kept draws. Without crossed effects nothing changes (bit-identical).

The ``centered`` setting of `spec.HierarchicalGLM` concerns the PyMC build only: this sampler
updates (mu, tau) in both parameterisations every sweep.

Proposal starting points (1, 4, 6) are fixed for the kept draws: the pilot mode (and half the
prior scale of sigma) until the middle of burn-in, then the mean of its second half. Only
burn-in, which is discarded, sees them change.

The per-cell passes (linear predictor, gradient and curvature sums, log-likelihood terms)
are fused numba loops; chains are a leading array axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np

from .crossed_moves import nested_shift, shift_basis, translate
from .hyperpriors import PoolingPriors


@dataclass
class LogitDesign(PoolingPriors):
    """Cells of a hierarchical logistic model in the sampler's parameter layout.

    ``A`` (cells x P) is each cell's design row, in a parameter layout common to every LLM;
    ``pooled`` lists the columns whose prior is N(mu, tau) (one mu, tau per column); the other
    columns have the fixed prior N(prior_mean, prior_sd). ``intercepts`` lists columns of
    which every cell has exactly one equal to 1 and the rest 0 (enables the translation move;
    empty to disable)."""

    A: np.ndarray
    llm: np.ndarray
    world: np.ndarray
    k: np.ndarray
    n: np.ndarray
    n_llm: int
    n_world: int
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    pooled: np.ndarray
    intercepts: np.ndarray
    world_effects: bool = True
    mean_X: np.ndarray | None = None  # LLMs x R: a structured pooled mean X beta (module docstring, 5', 6')
    mean_sd: np.ndarray | None = None  # R: the prior SD of each beta_r
    crossed_index: list = field(default_factory=list)  # per crossed effect: the level of every cell (step 7)
    crossed_sd: list = field(default_factory=list)  # per crossed effect: the HalfNormal scale of its sigma

    def __post_init__(self) -> None:
        self.A = np.ascontiguousarray(self.A, float)
        N, P = self.A.shape
        check_mean_design(self, self.n_llm, "LogitDesign")
        for name in ("llm", "world", "k", "n"):
            v = np.asarray(getattr(self, name), np.int64)
            if v.shape != (N,):
                raise ValueError(f"LogitDesign.{name} has shape {v.shape}; expected ({N},)")
            setattr(self, name, v)
        if N == 0:
            raise ValueError("LogitDesign: no cells")
        if np.any(self.n < 1) or np.any(self.k < 0) or np.any(self.k > self.n):
            raise ValueError("LogitDesign: every cell needs n >= 1 and 0 <= k <= n")
        if self.llm.min() < 0 or self.llm.max() >= self.n_llm or self.world.min() < 0 \
                or self.world.max() >= self.n_world:
            raise ValueError("LogitDesign: llm/world index out of range")
        if len(np.unique(self.llm)) != self.n_llm:
            raise ValueError("LogitDesign: every LLM needs at least one cell")
        self.prior_mean = np.asarray(self.prior_mean, float)
        self.prior_sd = np.asarray(self.prior_sd, float)
        if self.prior_mean.shape != (P,) or self.prior_sd.shape != (P,) or np.any(self.prior_sd <= 0):
            raise ValueError(f"LogitDesign: prior_mean and prior_sd need shape ({P},), prior_sd > 0")
        self.pooled = np.asarray(self.pooled, np.int64)
        self.intercepts = np.asarray(self.intercepts, np.int64)
        if len(self.intercepts) and not np.array_equal(self.A[:, self.intercepts].sum(axis=1), np.ones(N)):
            raise ValueError("LogitDesign: the intercept columns must hold exactly one 1 per cell")
        if np.intersect1d(self.pooled, self.intercepts).size:
            raise ValueError("LogitDesign: a column cannot be both pooled and an intercept")


# ---------------------------------------------------------------- fused per-cell passes
@numba.njit(cache=True, nogil=True, parallel=True)
def _sums_by(tab, lr, ug, gidx, bins, k, n, res, wgt):  # pragma: no cover - compiled
    """res[c, b] += k - n p, wgt[c, b] += n p (1 - p) over the cells of each bin b = bins[i]
    (design row or world group), p = logistic(tab[c, lr] + ug[c, g])."""
    for c in numba.prange(tab.shape[0]):  # chains in parallel
        for i in range(lr.shape[0]):
            p = 1.0 / (1.0 + np.exp(-(tab[c, lr[i]] + ug[c, gidx[i]])))
            res[c, bins[i]] += k[i] - n[i] * p
            wgt[c, bins[i]] += n[i] * p * (1.0 - p)


@numba.njit(cache=True, nogil=True, parallel=True)
def _sums_by_llm_scaled(tab, lr, scale, zg, gidx, llm, k, n, res, wgt):  # pragma: no cover - compiled
    """With eta = tab[c, lr] + scale[c, l] z[c, g]: res[c, l] += z (k - n p), wgt[c, l] += z^2 n p (1 - p)
    (gradient and curvature of the log-likelihood in the scale, given z)."""
    for c in numba.prange(tab.shape[0]):  # chains in parallel
        for i in range(lr.shape[0]):
            z = zg[c, gidx[i]]
            p = 1.0 / (1.0 + np.exp(-(tab[c, lr[i]] + scale[c, llm[i]] * z)))
            res[c, llm[i]] += z * (k[i] - n[i] * p)
            wgt[c, llm[i]] += z * z * n[i] * p * (1.0 - p)


@numba.njit(cache=True, nogil=True, parallel=True)
def _sums_by_level(tab, lr, ug, gidx, lev, vlev, k, n, res, wgt):  # pragma: no cover - compiled
    """`_sums_by` over the levels of a crossed effect with that effect's values added in the loop:
    res[c, j] += k - n p, wgt[c, j] += n p (1 - p) over the cells i of level j = lev[i],
    p = logistic(tab[c, lr] + vlev[c, j] + ug[c, g]) (no (chain x pair) array for tab + vlev[lev])."""
    for c in numba.prange(tab.shape[0]):  # chains in parallel
        for i in range(lr.shape[0]):
            j = lev[i]
            p = 1.0 / (1.0 + np.exp(-((tab[c, lr[i]] + vlev[c, j]) + ug[c, gidx[i]])))
            res[c, j] += k[i] - n[i] * p
            wgt[c, j] += n[i] * p * (1.0 - p)


@numba.njit(cache=True, nogil=True, parallel=True)
def _loglik_by_level(tab, lr, ug, gidx, lev, vs, k, n, out):  # pragma: no cover - compiled
    """out[a, c, j] = sum over the cells i of level j = lev[i] of a crossed effect (any order) of
    k eta - n log(1 + e^eta), eta = tab[c, lr] + ug[c, g] + vs[a, c, j]: the binomial log-likelihood
    up to log C(n, k) per level, for each of the V value arrays vs[a] (proposal and current state in
    one pass, step 7). As `_loglik_groups`, log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), the
    (1 + e^-|x|) of n = 1 cells multiplied per level before one log (logged early past 1e280)."""
    V, J = vs.shape[0], vs.shape[2]
    for c in numba.prange(tab.shape[0]):  # chains in parallel
        lin = np.zeros((V, J))
        prod = np.ones((V, J))
        for i in range(lr.shape[0]):
            j = lev[i]
            e0 = tab[c, lr[i]] + ug[c, gidx[i]]
            for a in range(V):
                eta = e0 + vs[a, c, j]
                lin[a, j] += k[i] * eta - n[i] * max(eta, 0.0)
                base = 1.0 + np.exp(-abs(eta))
                if n[i] == 1.0:
                    prod[a, j] *= base
                    if prod[a, j] > 1e280:
                        lin[a, j] -= np.log(prod[a, j])
                        prod[a, j] = 1.0
                else:
                    lin[a, j] -= n[i] * np.log(base)
        for a in range(V):
            for jj in range(J):
                out[a, c, jj] = lin[a, jj] - np.log(prod[a, jj])


@numba.njit(cache=True, nogil=True, parallel=True)
def _loglik_groups(tab, lr, ug, gidx, k, n, out):  # pragma: no cover - compiled
    """out[c, g] = sum over the cells of group g of k eta - n log(1 + e^eta): the binomial
    log-likelihood up to log C(n, k). Cells must be sorted by group. Uses
    log(1 + e^x) = max(x, 0) + log(1 + e^-|x|) and takes one log per group of the product of
    the (1 + e^-|x|)^n (each factor in (1, 2]; the product is logged early when it grows past
    1e280, and a cell with n > 64 is logged on its own), so a cell costs one exp instead of an
    exp and a log."""
    for c in numba.prange(tab.shape[0]):  # chains in parallel
        out[c, :] = 0.0
        lin = 0.0
        prod = 1.0
        for i in range(lr.shape[0]):
            eta = tab[c, lr[i]] + ug[c, gidx[i]]
            lin += k[i] * eta - n[i] * max(eta, 0.0)
            base = 1.0 + np.exp(-abs(eta))
            e = int(n[i])
            if e > 64:  # keep the product below overflow: log this factor directly
                lin -= n[i] * np.log(base)
                e = 0
            while e:  # base ** n for integer n, by squaring
                if e & 1:
                    prod *= base
                base *= base
                e >>= 1
            if prod > 1e280:
                lin -= np.log(prod)
                prod = 1.0
            if i + 1 == lr.shape[0] or gidx[i + 1] != gidx[i]:
                out[c, gidx[i]] = lin - np.log(prod)
                lin = 0.0
                prod = 1.0


# ---------------------------------------------------------------- scalar updates
def _slice_log(logp: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, width: float,
               rng: np.random.Generator, max_out: int = 64) -> np.ndarray:
    """One slice-sampling update of every element of ``x0`` (independent 1-D targets):
    stepping out with the random split of Neal (2003, fig. 3) and shrinkage (fig. 5)."""
    logy = logp(x0) - rng.exponential(size=x0.shape)
    lo = x0 - width * rng.random(x0.shape)
    hi = lo + width
    j = np.floor(max_out * rng.random(x0.shape))
    kk = max_out - 1 - j
    for _ in range(max_out):
        m = (j > 0) & (logp(lo) > logy)
        if not m.any():
            break
        lo = np.where(m, lo - width, lo)
        j = j - m
    for _ in range(max_out):
        m = (kk > 0) & (logp(hi) > logy)
        if not m.any():
            break
        hi = np.where(m, hi + width, hi)
        kk = kk - m
    x = x0.copy()
    todo = np.ones(x0.shape, bool)
    while todo.any():
        prop = lo + (hi - lo) * rng.random(x0.shape)
        ok = todo & (logp(prop) > logy)
        x = np.where(ok, prop, x)
        todo &= ~ok
        lo = np.where(todo & (prop < x0), prop, lo)
        hi = np.where(todo & (prop >= x0), prop, hi)
    return x


def update_pooled(beta: np.ndarray, tau: np.ndarray, mu_sd: float, tau_shape: float, tau_rate: float,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One Gibbs update of the pooling hyperparameters of coefficients ``beta`` (C x L x K):
    mu_j | beta, tau (conjugate normal, prior N(0, mu_sd)), then tau_j | beta, mu (slice sampler on
    log tau; prior Gamma(tau_shape, tau_rate))."""
    C, L, K = beta.shape
    pm_ = 1.0 / mu_sd ** 2 + L / tau ** 2
    mu = (beta.sum(axis=1) / tau ** 2) / pm_ + rng.standard_normal((C, K)) / np.sqrt(pm_)
    ssb = ((beta - mu[:, None, :]) ** 2).sum(axis=1)
    tau = np.exp(_slice_log(lambda x: (tau_shape - L) * x - tau_rate * np.exp(x) - 0.5 * ssb * np.exp(-2 * x),
                            np.log(tau), 1.0, rng))
    return mu, tau


def check_mean_design(d, n_unit: int, what: str) -> None:
    """The structured pooled mean's layout: X (units x R) with R prior SDs > 0, or neither."""
    if (d.mean_X is None) != (d.mean_sd is None):
        raise ValueError(f"{what}: mean_X and mean_sd go together")
    if d.mean_X is not None:
        d.mean_X = np.ascontiguousarray(d.mean_X, float)
        d.mean_sd = np.asarray(d.mean_sd, float)
        R = d.mean_X.shape[1] if d.mean_X.ndim == 2 else -1
        if d.mean_X.shape != (n_unit, R) or d.mean_sd.shape != (R,) or np.any(d.mean_sd <= 0):
            raise ValueError(f"{what}: mean_X needs shape (units, R) and mean_sd shape (R,) with SDs > 0")
        if not len(d.pooled):
            raise ValueError(f"{what}: a structured pooled mean needs pooled columns")


def pooled_mean(mu: np.ndarray, d) -> np.ndarray:
    """The prior mean of the pooled columns for every unit, broadcastable to (chain, unit, pooled):
    mu (chain x pooled) without a structured mean, else X beta with beta = ``mu`` (chain x R x pooled)."""
    if d.mean_X is None:
        return mu[:, None, :]
    return np.einsum("lr,crk->clk", d.mean_X, mu)


def update_pooled_regression(beta: np.ndarray, tau: np.ndarray, X: np.ndarray, sd: np.ndarray, tau_shape: float,
                             tau_rate: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Step 5' (module docstring): coefficients ``beta`` (C x L x K) with prior N(X coef, tau).
    coef[., k] | beta, tau ~ N(V X' beta_k / tau_k^2, V), V^-1 = X'X / tau_k^2 + diag(1 / sd^2);
    then tau_k | beta, coef by the slice sampler of `update_pooled`. Returns (coef C x R x K, tau)."""
    C, L, K = beta.shape
    R = X.shape[1]
    w = 1.0 / tau ** 2  # C x K
    prec = (X.T @ X)[None, None] * w[..., None, None] + np.diag(1.0 / sd ** 2)  # C x K x R x R
    lin = np.einsum("lr,clk->ckr", X, beta) * w[..., None]
    chol = np.linalg.cholesky(prec)
    coef = np.linalg.solve(prec, lin[..., None])[..., 0] \
        + np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, K, R))[..., None])[..., 0]
    coef = np.swapaxes(coef, 1, 2)  # C x R x K
    ssb = ((beta - np.einsum("lr,crk->clk", X, coef)) ** 2).sum(axis=1)
    tau = np.exp(_slice_log(lambda x: (tau_shape - L) * x - tau_rate * np.exp(x) - 0.5 * ssb * np.exp(-2 * x),
                            np.log(tau), 1.0, rng))
    return coef, tau


def _pooled_noncentred_regression(theta, coef, tau, start, d: LogitDesign, cells: "_Cells", ug, ll, ll_new, rng):
    """Step 6' of the module docstring (the structured mean X coef): as `_pooled_noncentred`, over
    (coef, log tau) with theta_lj = (X coef)_lj + e^x_j z_lj."""
    J, X, sd = d.pooled, d.mean_X, d.mean_sd
    C, L, P = theta.shape
    K, R = len(J), X.shape[1]
    RK = R * K
    z = (theta[..., J] - np.einsum("lr,crk->clk", X, coef)) / tau[:, None, :]
    cs, xs = start  # C x R x K, C x K
    ts = np.exp(xs)
    at_start = theta.copy()
    at_start[..., J] = np.einsum("lr,crk->clk", X, cs) + ts[:, None, :] * z
    grad, H = _theta_newton_terms(at_start, cells, ug, cells.gidx, np.zeros(P), np.zeros(P))  # likelihood only
    gJ, HJ = grad[..., J], H[:, :, J][:, :, :, J]
    prior_c = (1.0 / sd ** 2)[None, :, None]  # 1 x R x 1
    g_c = np.einsum("lr,clk->crk", X, gJ) - cs * prior_c
    g = np.concatenate([g_c.reshape(C, RK), ts * (gJ * z).sum(1) + d.tau_shape - d.tau_rate * ts], axis=1)
    Hcc = np.einsum("lr,ls,cljk->crjsk", X, X, HJ).reshape(C, RK, RK) + np.diag(np.repeat(1.0 / sd ** 2, K))
    Hcx = (np.einsum("lr,cljk,clk->crjk", X, HJ, z) * ts[:, None, None, :]).reshape(C, RK, K)
    Hxx = np.einsum("clj,cljk,clk->cjk", z, HJ, z) * ts[:, :, None] * ts[:, None, :] + d.tau_rate * ts[:, :, None] * np.eye(K)
    Hb = np.block([[Hcc, Hcx], [np.swapaxes(Hcx, 1, 2), Hxx]])
    centre = np.concatenate([cs.reshape(C, RK), xs], axis=1) + np.linalg.solve(Hb, g[..., None])[..., 0]
    chol = np.linalg.cholesky(Hb)
    prop = centre + np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, RK + K))[..., None])[..., 0]
    c_p, x_p = prop[:, :RK].reshape(C, R, K), prop[:, RK:]
    tau_p = np.exp(x_p)
    theta_p = theta.copy()
    theta_p[..., J] = np.einsum("lr,crk->clk", X, c_p) + tau_p[:, None, :] * z
    _loglik_groups(_table(theta_p, cells), cells.lr, ug, cells.gidx, cells.k, cells.n, ll_new)

    def log_prior(c_, x_):
        return -0.5 * (c_ ** 2 * prior_c).sum((1, 2)) + (d.tau_shape * x_ - d.tau_rate * np.exp(x_)).sum(-1)

    cur = np.concatenate([coef.reshape(C, RK), np.log(tau)], axis=1)
    dq_new = np.einsum("ci,cij,cj->c", prop - centre, Hb, prop - centre)
    dq_old = np.einsum("ci,cij,cj->c", cur - centre, Hb, cur - centre)
    log_a = (ll_new.sum(1) + log_prior(c_p, x_p) - ll.sum(1) - log_prior(coef, np.log(tau))
             + 0.5 * (dq_new - dq_old))
    ok = np.log(rng.random(C)) < log_a
    return (np.where(ok[:, None, None], theta_p, theta), np.where(ok[:, None, None], c_p, coef),
            np.where(ok[:, None], tau_p, tau), ok)


def _pooled_noncentred(theta, mu, tau, start, d: LogitDesign, cells: "_Cells", ug, ll, ll_new, rng):
    """Step 6 of the module docstring, for every chain at once: returns theta (pooled columns at
    mu' + tau' z where accepted), mu, tau, and the acceptance per chain (``ll_new`` then holds the
    proposal's log-likelihood by group)."""
    J = d.pooled
    C, L, P = theta.shape
    K = len(J)
    z = (theta[..., J] - mu[:, None, :]) / tau[:, None, :]
    ms, xs = start
    ts = np.exp(xs)
    at_start = theta.copy()
    at_start[..., J] = ms[:, None, :] + ts[:, None, :] * z
    grad, H = _theta_newton_terms(at_start, cells, ug, cells.gidx, np.zeros(P), np.zeros(P))  # likelihood only
    gJ, HJ = grad[..., J], H[:, :, J][:, :, :, J]
    # chain rule through theta_lj = mu_j + e^x_j z_lj (the curvature without the gradient term: a proposal)
    g = np.concatenate([gJ.sum(1) - ms / d.mu_sd ** 2, ts * (gJ * z).sum(1) + d.tau_shape - d.tau_rate * ts], axis=1)
    Hmm = HJ.sum(1) + np.eye(K) / d.mu_sd ** 2
    Hmx = np.einsum("cljk,clk->cjk", HJ, z) * ts[:, None, :]
    Hxx = np.einsum("clj,cljk,clk->cjk", z, HJ, z) * ts[:, :, None] * ts[:, None, :] + d.tau_rate * ts[:, :, None] * np.eye(K)
    Hb = np.block([[Hmm, Hmx], [np.swapaxes(Hmx, 1, 2), Hxx]])
    centre = np.concatenate([ms, xs], axis=1) + np.linalg.solve(Hb, g[..., None])[..., 0]
    chol = np.linalg.cholesky(Hb)
    prop = centre + np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, 2 * K))[..., None])[..., 0]
    mu_p, x_p = prop[:, :K], prop[:, K:]
    tau_p = np.exp(x_p)
    theta_p = theta.copy()
    theta_p[..., J] = mu_p[:, None, :] + tau_p[:, None, :] * z
    _loglik_groups(_table(theta_p, cells), cells.lr, ug, cells.gidx, cells.k, cells.n, ll_new)

    def log_prior(m_, x_):
        return (-0.5 * m_ ** 2 / d.mu_sd ** 2 + d.tau_shape * x_ - d.tau_rate * np.exp(x_)).sum(-1)

    cur = np.concatenate([mu, np.log(tau)], axis=1)
    dq_new = np.einsum("ci,cij,cj->c", prop - centre, Hb, prop - centre)
    dq_old = np.einsum("ci,cij,cj->c", cur - centre, Hb, cur - centre)
    log_a = (ll_new.sum(1) + log_prior(mu_p, x_p) - ll.sum(1) - log_prior(mu, np.log(tau))
             + 0.5 * (dq_new - dq_old))
    ok = np.log(rng.random(C)) < log_a
    return (np.where(ok[:, None, None], theta_p, theta), np.where(ok[:, None], mu_p, mu),
            np.where(ok[:, None], tau_p, tau), ok)


class _Cells:
    """Sweep-invariant arrays: cells sorted by (LLM, world) group; the distinct (LLM, design row)
    pairs, so that a linear predictor is computed once per pair (few pairs when the design has a
    few cue configurations, one per cell when a predictor is continuous)."""

    def __init__(self, d: LogitDesign):
        order = np.lexsort((d.world, d.llm))
        A = d.A[order]
        self.l = d.llm[order]
        self.w = d.world[order]
        self.k = d.k[order].astype(float)
        self.n = d.n[order].astype(float)
        g = self.l * d.n_world + self.w
        self.gstart = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        self.gidx = np.cumsum(np.r_[False, g[1:] != g[:-1]]).astype(np.int64)
        self.gl = self.l[self.gstart]
        self.gw = self.w[self.gstart]
        self.glstart = np.flatnonzero(np.r_[True, self.gl[1:] != self.gl[:-1]])  # first group of each LLM
        T = len(d.crossed_index)
        levels = [np.asarray(ix, np.int64)[order] for ix in d.crossed_index]
        keyed = np.column_stack([self.l.astype(float), *[lv.astype(float) for lv in levels], A])
        pairs, r = np.unique(keyed, axis=0, return_inverse=True)  # sorted by LLM first
        self.pl = np.ascontiguousarray(pairs[:, 0].astype(np.int64))  # the LLM of each pair
        self.plev = [pairs[:, 1 + t].astype(np.int64) for t in range(T)]  # each pair's crossed levels
        self.n_lev = [int(lv.max()) + 1 for lv in levels]
        self.offset = None  # C x pairs: the crossed effects' sum per pair (None without them; step 7)
        self.U = np.ascontiguousarray(pairs[:, 1 + T:])  # its design row
        self.lr = np.ascontiguousarray(r.ravel().astype(np.int64))
        self.diag = np.arange(A.shape[1])


def _pilot(d: LogitDesign, cells: _Cells, iters: int = 25) -> np.ndarray:
    """The starting point of the theta proposals during burn-in: the mode of theta given
    u = 0 under the prior with mu = 0 and tau = 1 for the pooled columns (Newton's method)."""
    L, P = d.n_llm, d.A.shape[1]
    theta = np.zeros((1, L, P))
    prec = 1.0 / d.prior_sd ** 2
    prec[d.pooled] = 1.0
    mean = d.prior_mean.copy()
    mean[d.pooled] = 0.0
    zero = np.zeros((1, 1))
    gz = np.zeros_like(cells.gidx)
    for _ in range(iters):
        grad, H = _theta_newton_terms(theta, cells, zero, gz, prec, mean)
        step = np.linalg.solve(H, grad[..., None])[..., 0]
        theta = theta + step
        if np.abs(step).max() < 1e-10:
            break
    return theta[0]


@numba.njit(cache=True, nogil=True, parallel=True)
def _pair_table(theta, pl, U, out):  # pragma: no cover - compiled
    """out[c, j] = U[j] . theta[c, pl[j]]: the linear predictor of every (LLM, design row) pair."""
    for c in numba.prange(theta.shape[0]):
        for j in range(U.shape[0]):
            acc = 0.0
            for p in range(U.shape[1]):
                acc += U[j, p] * theta[c, pl[j], p]
            out[c, j] = acc


@numba.njit(cache=True, nogil=True, parallel=True)
def _pair_moments(res, wgt, pl, U, grad, H):  # pragma: no cover - compiled
    """grad[c, l] += sum_j res[c, j] U[j], H[c, l] += sum_j wgt[c, j] U[j] U[j]' over the pairs j of LLM l."""
    P = U.shape[1]
    for c in numba.prange(res.shape[0]):
        for j in range(U.shape[0]):
            l = pl[j]
            r = res[c, j]
            w = wgt[c, j]
            for p in range(P):
                up = U[j, p]
                grad[c, l, p] += r * up
                wu = w * up
                for q in range(P):
                    H[c, l, p, q] += wu * U[j, q]


def _table(theta: np.ndarray, cells: _Cells) -> np.ndarray:
    """(C x pairs) linear predictor a' theta[l] of every distinct (LLM, design row) pair."""
    out = np.empty((len(theta), len(cells.U)))
    _pair_table(np.ascontiguousarray(theta), cells.pl, cells.U, out)
    if cells.offset is not None:
        out += cells.offset
    return out


def _theta_newton_terms(theta, cells: _Cells, ug, gidx, prec, mean):
    """Gradient and negative Hessian of log p(theta | u) at ``theta`` (C x L x P)."""
    C, L, P = theta.shape
    tab = _table(theta, cells)
    res = np.zeros_like(tab)
    wgt = np.zeros_like(tab)
    _sums_by(tab, cells.lr, ug, gidx, cells.lr, cells.k, cells.n, res, wgt)
    grad = np.zeros((C, L, P))
    H = np.zeros((C, L, P, P))
    _pair_moments(res, wgt, cells.pl, cells.U, grad, H)
    grad -= prec * (theta - mean)
    H[..., cells.diag, cells.diag] += prec
    return grad, H


@dataclass
class _State:
    """The sampler's state, every chain at once (leading axis: chain)."""

    theta: np.ndarray  # chain x LLM x design column: the coefficients
    mu: np.ndarray  # chain x pooled column: the pooled columns' mean (chain x R x pooled: beta of X beta)
    tau: np.ndarray  # chain x pooled column: their between-LLM SD
    sigma: np.ndarray  # chain x LLM: the world effects' SD
    group_u: np.ndarray  # chain x (LLM, world) group with cells: its world effect (0 without world effects)
    u: np.ndarray  # chain x LLM x world: every world effect (prior draws for worlds an LLM never saw)
    loglik: np.ndarray  # chain x (LLM, world) group: the log-likelihood of the current state


@dataclass
class _Starts:
    """Where the Newton proposals start (fixed for the kept draws; module docstring)."""

    theta: np.ndarray
    sigma: np.ndarray
    mu: np.ndarray
    log_tau: np.ndarray


def _theta_prior(s: _State, d: LogitDesign) -> tuple[np.ndarray, np.ndarray]:
    """Prior precision and mean of every theta entry (chain x LLM x column): fixed, or N(mu, tau)."""
    shape = s.theta.shape
    prec = np.broadcast_to(1.0 / d.prior_sd ** 2, shape).copy()
    mean = np.broadcast_to(d.prior_mean, shape).copy()
    prec[..., d.pooled] = (1.0 / s.tau ** 2)[:, None, :]
    mean[..., d.pooled] = pooled_mean(s.mu, d)
    return prec, mean


def _start_state(d: LogitDesign, cells: "_Cells", theta0: np.ndarray, n_chain: int, overdispersed: float,
                 rng: np.random.Generator) -> _State:
    """theta at the pilot mode, mu at its pooled columns, tau at its prior mean, u = 0; with
    ``overdispersed`` each chain starts elsewhere (see `logit_gibbs`)."""
    n_llm, n_param = d.n_llm, d.A.shape[1]
    n_pooled, n_group = len(d.pooled), len(cells.gstart)
    theta = np.broadcast_to(theta0, (n_chain, n_llm, n_param)).copy()
    if d.mean_X is None:
        mu = theta0[:, d.pooled].mean(axis=0) + 0.1 * rng.standard_normal((n_chain, n_pooled))
    else:  # the ridge fit of the pilot's pooled columns on X
        X = d.mean_X
        fit = np.linalg.solve(X.T @ X + np.diag(1.0 / d.mean_sd ** 2), X.T @ theta0[:, d.pooled])
        mu = fit + 0.1 * rng.standard_normal((n_chain, *fit.shape))
    s = _State(theta=theta, mu=mu, tau=np.full((n_chain, n_pooled), d.tau_shape / d.tau_rate),
               sigma=np.full((n_chain, n_llm), 0.5 * d.sigma_sd), group_u=np.zeros((n_chain, n_group)),
               u=np.zeros((n_chain, n_llm, d.n_world)), loglik=np.empty((n_chain, n_group)))
    if overdispersed:
        # theta: a draw from the Laplace approximation at the pilot mode with its spread times
        # ``overdispersed``: apart, yet not so far into its tails that an independence step never leaves
        s.tau = rng.gamma(d.tau_shape, 1.0 / d.tau_rate, size=(n_chain, n_pooled))
        prec, mean = _theta_prior(s, d)
        grad, H = _theta_newton_terms(s.theta, cells, s.group_u, cells.gidx, prec, mean)
        centre = s.theta + np.linalg.solve(H, grad[..., None])[..., 0]
        chol = np.linalg.cholesky(H)
        s.theta = centre + overdispersed * np.linalg.solve(
            np.swapaxes(chol, -1, -2), rng.standard_normal(s.theta.shape)[..., None])[..., 0]
        s.sigma = s.sigma * rng.uniform(0.5, 1.5, size=(n_chain, n_llm))
    _loglik_groups(_table(s.theta, cells), cells.lr, s.group_u, cells.gidx, cells.k, cells.n, s.loglik)
    return s


def _step_theta(s: _State, d: LogitDesign, cells: "_Cells", start: np.ndarray, newton: int, tries: int, rho_odd: float,
                scratch: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Step 1: theta | u, mu, tau by MH with the Gaussian of ``newton`` Newton steps from ``start``;
    ``tries`` proposals, the odd ones autoregressive. Returns the acceptance (chain x LLM, mean over tries)."""
    prec, mean = _theta_prior(s, d)
    centre = start
    for _ in range(newton):
        grad, H = _theta_newton_terms(centre, cells, s.group_u, cells.gidx, prec, mean)
        centre = centre + np.linalg.solve(H, grad[..., None])[..., 0]
    chol = np.linalg.cholesky(H)  # H = chol chol'; draw centre + chol'^-1 z
    accepted = np.zeros(s.theta.shape[:2])
    for tr in range(tries):  # repeated MH steps, each leaving p(theta | u) invariant
        # even tries: independence proposal; odd tries: autoregressive (rho > 0), local to theta
        rho = rho_odd if tr % 2 == 1 else 0.0
        step = np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal(s.theta.shape)[..., None])[..., 0]
        prop = centre + rho * (s.theta - centre) + np.sqrt(1.0 - rho ** 2) * step
        _loglik_groups(_table(prop, cells), cells.lr, s.group_u, cells.gidx, cells.k, cells.n, scratch)
        lp_new = np.add.reduceat(scratch, cells.glstart, axis=1) - 0.5 * (prec * (prop - mean) ** 2).sum(-1)
        lp_old = np.add.reduceat(s.loglik, cells.glstart, axis=1) - 0.5 * (prec * (s.theta - mean) ** 2).sum(-1)
        dq_new = np.einsum("clp,clpq,clq->cl", prop - centre, H, prop - centre)
        dq_old = np.einsum("clp,clpq,clq->cl", s.theta - centre, H, s.theta - centre)
        log_a = lp_new - lp_old + 0.5 * (dq_new - dq_old)  # the same ratio for any rho (module docstring, 1.)
        ok = np.log(rng.random(accepted.shape)) < log_a
        s.theta = np.where(ok[..., None], prop, s.theta)
        s.loglik = np.where(ok[:, cells.gl], scratch, s.loglik)
        accepted += ok / tries
    return accepted


def _step_world_effects(s: _State, d: LogitDesign, cells: "_Cells", newton: int, scratch: np.ndarray,
                        rng: np.random.Generator) -> np.ndarray:
    """Step 2: u | theta, sigma, independence MH per world group with a Newton proposal from 0;
    then the worlds an LLM never saw from their prior. Returns the acceptance (chain: mean over groups)."""
    n_chain, n_group = s.group_u.shape
    tab = _table(s.theta, cells)
    iv2 = 1.0 / s.sigma[:, cells.gl] ** 2
    centre = np.zeros((n_chain, n_group))
    for _ in range(newton):
        res = np.zeros((n_chain, n_group))
        h = np.zeros((n_chain, n_group))
        _sums_by(tab, cells.lr, centre, cells.gidx, cells.gidx, cells.k, cells.n, res, h)
        h += iv2
        centre = centre + (res - iv2 * centre) / h
    prop = centre + rng.standard_normal((n_chain, n_group)) / np.sqrt(h)
    _loglik_groups(tab, cells.lr, prop, cells.gidx, cells.k, cells.n, scratch)
    log_a = (scratch - 0.5 * iv2 * prop ** 2 - s.loglik + 0.5 * iv2 * s.group_u ** 2
             + 0.5 * h * ((prop - centre) ** 2 - (s.group_u - centre) ** 2))
    ok = np.log(rng.random((n_chain, n_group))) < log_a
    s.group_u = np.where(ok, prop, s.group_u)
    s.loglik = np.where(ok, scratch, s.loglik)
    s.u = s.sigma[:, :, None] * rng.standard_normal(s.u.shape)  # worlds an LLM never saw: prior
    s.u[:, cells.gl, cells.gw] = s.group_u
    return ok.mean(axis=1)


def _step_translate(s: _State, d: LogitDesign, cells: "_Cells", rng: np.random.Generator) -> None:
    """Step 3: alpha[l] + c, u[l] - c (every eta unchanged), c | rest Gaussian from the priors."""
    if not len(d.intercepts):
        return
    n_world = s.u.shape[2]
    prior_prec = 1.0 / d.prior_sd[d.intercepts] ** 2
    alpha = s.theta[..., d.intercepts]
    cprec = prior_prec.sum() + n_world / s.sigma ** 2
    cmean = (((d.prior_mean[d.intercepts] - alpha) * prior_prec).sum(-1) + s.u.sum(axis=2) / s.sigma ** 2) / cprec
    shift = cmean + rng.standard_normal(s.sigma.shape) / np.sqrt(cprec)
    s.theta[..., d.intercepts] += shift[..., None]
    s.u -= shift[..., None]
    s.group_u = s.u[:, cells.gl, cells.gw]


def _step_sigma_centred(s: _State, d: LogitDesign, rng: np.random.Generator) -> None:
    """Step 4a: sigma | u, slice sampler on x = log sigma:
    log p(x) = -e^2x / (2 s0^2) - W x - SS e^-2x / 2 + x."""
    n_world = s.u.shape[2]
    ss = (s.u ** 2).sum(axis=2)
    s2 = d.sigma_sd ** 2
    s.sigma = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s2) - (n_world - 1) * x - 0.5 * ss * np.exp(-2 * x),
                                np.log(s.sigma), 1.0, rng))


def _step_sigma_noncentred(s: _State, d: LogitDesign, cells: "_Cells", start: np.ndarray, newton: int,
                           scratch: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Step 4b: sigma | z = u / sigma, theta (interweaving): independence MH with a Newton proposal
    of log p(sigma | z) = loglik(e + sigma z) - sigma^2 / (2 s0^2). Returns acceptance (chain x LLM)."""
    z = s.u / s.sigma[..., None]
    zg = z[:, cells.gl, cells.gw]
    tab = _table(s.theta, cells)  # intercepts moved in step 3
    s2 = d.sigma_sd ** 2
    centre = start
    for _ in range(newton):
        res = np.zeros(s.sigma.shape)
        hs = np.zeros(s.sigma.shape)
        _sums_by_llm_scaled(tab, cells.lr, centre, zg, cells.gidx, cells.l, cells.k, cells.n, res, hs)
        hs += 1.0 / s2
        centre = centre + (res - centre / s2) / hs
    prop = centre + rng.standard_normal(s.sigma.shape) / np.sqrt(hs)
    pos = prop > 0  # the target is 0 below 0: such proposals are rejected
    prop = np.where(pos, prop, s.sigma)
    _loglik_groups(tab, cells.lr, prop[:, cells.gl] * zg, cells.gidx, cells.k, cells.n, scratch)
    log_a = (np.add.reduceat(scratch, cells.glstart, axis=1) - 0.5 * prop ** 2 / s2
             - np.add.reduceat(s.loglik, cells.glstart, axis=1) + 0.5 * s.sigma ** 2 / s2
             + 0.5 * hs * ((prop - centre) ** 2 - (s.sigma - centre) ** 2))
    ok = pos & (np.log(rng.random(s.sigma.shape)) < log_a)
    s.sigma = np.where(ok, prop, s.sigma)
    s.loglik = np.where(ok[:, cells.gl], scratch, s.loglik)
    s.u = s.sigma[..., None] * z
    s.group_u = s.u[:, cells.gl, cells.gw]
    return ok


def _step_pooled_noncentred(s: _State, d: LogitDesign, cells: "_Cells", start, scratch: np.ndarray,
                            rng: np.random.Generator) -> np.ndarray:
    """Step 6: (mu, log tau) | z (`_pooled_noncentred`; 6', `_pooled_noncentred_regression`, with a
    structured mean). Returns the acceptance (chain)."""
    step = _pooled_noncentred if d.mean_X is None else _pooled_noncentred_regression
    s.theta, s.mu, s.tau, ok = step(s.theta, s.mu, s.tau, start, d, cells, s.group_u, s.loglik, scratch, rng)
    s.loglik = np.where(ok[:, None], scratch, s.loglik)
    return ok


def _step_crossed(s: _State, d: LogitDesign, cells: "_Cells", v: list, csig: np.ndarray, newton: int,
                  moves: list, sig_start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Step 7: each crossed effect's levels v_t[j] | rest by independence MH with a Newton proposal
    from 0; 7b, the translation moves (`crossed_moves`: against the intercepts and the level-constant
    slopes, and, for an effect on the nested effect's groups, per level against those); then sigma_t
    interweaved: given v_t (slice sampler, as 4a) and given z_t = v_t / sigma_t (as 4b, an
    independence MH step with the Gaussian of ``newton`` Newton steps from ``sig_start``). Updates
    ``v``, ``csig``, theta, mu, the nested effects, cells.offset and s.loglik; returns the acceptance
    (chain x effect: mean over levels, and over the non-centred scale step)."""
    C = s.theta.shape[0]
    acc = np.zeros((C, len(v)))
    cell_lev = [plev[cells.lr] for plev in cells.plev]
    for t in range(len(v)):
        J = cells.n_lev[t]
        cells.offset = sum((v[q][:, cells.plev[q]] for q in range(len(v)) if q != t), np.zeros_like(cells.offset))
        base = _table(s.theta, cells)  # without v_t
        iv2 = 1.0 / csig[:, t, None] ** 2

        def loglik(*vts):  # per level, at each of the values vts (one pass)
            vs = np.ascontiguousarray(np.stack(vts))
            out = np.empty_like(vs)
            _loglik_by_level(base, cells.lr, s.group_u, cells.gidx, cell_lev[t], vs, cells.k, cells.n, out)
            return out

        centre = np.zeros((C, J))
        for _ in range(newton):
            res, h = np.zeros((C, J)), np.zeros((C, J))
            _sums_by_level(base, cells.lr, s.group_u, cells.gidx, cell_lev[t], centre, cells.k, cells.n, res, h)
            h += iv2
            centre = centre + (res - iv2 * centre) / h
        prop = centre + rng.standard_normal((C, J)) / np.sqrt(h)
        ll_prop, ll_cur = loglik(prop, v[t])
        log_a = (ll_prop - 0.5 * iv2 * prop ** 2 - ll_cur + 0.5 * iv2 * v[t] ** 2
                 + 0.5 * h * ((prop - centre) ** 2 - (v[t] - centre) ** 2))
        ok = np.log(rng.random((C, J))) < log_a
        v[t] = np.where(ok, prop, v[t])
        ll_v = np.where(ok, ll_prop, ll_cur)  # per level at the new v_t: unchanged by 7b and by sigma_t | v_t
        acc[:, t] = ok.mean(1)
        if moves is None:  # crossed_moves=False: v_t and the centred sigma_t step only
            cells.offset = sum((v[q][:, cells.plev[q]] for q in range(len(v))), np.zeros_like(cells.offset))
            ss, s02 = (v[t] ** 2).sum(1), float(d.crossed_sd[t]) ** 2
            csig[:, t] = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s02) - (J - 1) * x - 0.5 * ss * np.exp(-2 * x),
                                           np.log(csig[:, t]), 1.0, rng))
            continue
        # 7b. translations (every linear predictor unchanged)
        basis, nested = moves[t]
        translate(s.theta, s.mu, v[t], csig[:, t], basis, d, rng)
        if nested:
            shift = nested_shift(s.group_u, s.sigma[:, cells.gl], cells.gw, v[t], csig[:, t], rng)
            s.group_u = s.group_u + shift[:, cells.gw]
            s.u[:, cells.gl, cells.gw] = s.group_u
            v[t] = v[t] - shift
        base = _table(s.theta, cells)  # theta moved with v_t: the linear predictors without v_t are new
        # 7c. sigma_t | v_t (centred), then sigma_t | z_t (non-centred)
        ss, s02 = (v[t] ** 2).sum(1), float(d.crossed_sd[t]) ** 2
        csig[:, t] = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s02) - (J - 1) * x - 0.5 * ss * np.exp(-2 * x),
                                       np.log(csig[:, t]), 1.0, rng))
        z = v[t] / csig[:, t, None]
        sc = sig_start[:, t].copy()
        for _ in range(newton):
            res, h = np.zeros((C, J)), np.zeros((C, J))
            _sums_by_level(base, cells.lr, s.group_u, cells.gidx, cell_lev[t], sc[:, None] * z, cells.k, cells.n,
                           res, h)
            hs = (h * z ** 2).sum(1) + 1.0 / s02
            sc = sc + ((res * z).sum(1) - sc / s02) / hs
        prop_s = sc + rng.standard_normal(C) / np.sqrt(hs)
        pos = prop_s > 0  # the target is 0 below 0: such proposals are rejected
        prop_s = np.where(pos, prop_s, csig[:, t])
        log_a = (loglik(prop_s[:, None] * z)[0].sum(1) - 0.5 * prop_s ** 2 / s02
                 - ll_v.sum(1) + 0.5 * csig[:, t] ** 2 / s02
                 + 0.5 * hs * ((prop_s - sc) ** 2 - (csig[:, t] - sc) ** 2))
        ok_s = pos & (np.log(rng.random(C)) < log_a)
        csig[:, t] = np.where(ok_s, prop_s, csig[:, t])
        v[t] = csig[:, t, None] * z
        cells.offset = sum((v[q][:, cells.plev[q]] for q in range(len(v))), np.zeros_like(cells.offset))
    _loglik_groups(_table(s.theta, cells), cells.lr, s.group_u, cells.gidx, cells.k, cells.n, s.loglik)
    return acc


def logit_gibbs(design: LogitDesign, *, draws: int = 1000, tune: int = 100, chains: int = 4,
                random_seed: int | None = 0, newton_theta: int = 1, theta_tries: int = 1, newton_u: int = 1,
                newton_sigma: int = 1, overdispersed: float = 1.3, keep_u: bool = True, theta_rho: float = 0.5,
                interweave_pooled: bool = True, newton_crossed: int = 2, crossed_moves: bool = True,
                progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Sample the posterior of ``design``'s model (see the module docstring).

    Returns arrays with leading (chain, draw) axes: ``theta`` (llm, P), ``mu`` and ``tau``
    (pooled columns; with a structured mean ``mean_coef`` (R, pooled), the beta of X beta, in place of mu), with world effects ``sigma`` (llm) and ``u`` (llm, world), and the
    Metropolis-Hastings acceptance rates ``accept_theta`` (chain, llm), and with world effects
    ``accept_u`` (chain: mean over world groups) and ``accept_sigma`` (chain, llm). The first ``tune`` sweeps of
    each chain are burn-in and discarded; the proposals' starting points are the pilot mode
    until the middle of burn-in and the mean of its second half from then on (fixed for every
    kept draw). ``newton_theta``, ``newton_u`` and ``newton_sigma`` set the Newton steps behind
    the proposals (more: higher acceptance, one pass over the cells each); ``theta_tries``
    repeats the theta step with fresh proposals from the same Gaussian (one pass each), for
    large blocks whose acceptance is low; every second try is autoregressive with correlation
    ``theta_rho`` (0 <= rho < 1; 0 makes every try an independence step). ``overdispersed`` (default 1.3; 0 = off) starts each
    chain's state away from the pilot mode: theta drawn from the Laplace approximation there with
    its spread multiplied by this factor, tau from its prior, sigma scaled by a uniform (0.5, 1.5)
    factor, so that R-hat compares chains that began apart (Gelman & Rubin 1992); the proposals
    still start from the pilot mode. ``keep_u=False`` keeps only the scale ``sigma`` of the world
    effects (they are nuisance parameters; with hundreds of thousands of them their draws would
    not fit in memory). ``crossed_moves=False`` leaves out steps 7b and the non-centred half of 7c
    (the crossed effects' translations and sigma_t | z_t; for comparison). An independence step cannot leave a start far in the tails:
    with a factor of 2 the 53-parameter blocks of the demo's intervention model never moved
    (acceptance 0, R-hat 2.26); 1.0 and 1.3 converged there (R-hat 1.004 / 1.005)."""
    if draws < 1 or tune < 0 or chains < 1:
        raise ValueError("logit_gibbs needs draws >= 1, tune >= 0 and chains >= 1")
    if min(newton_theta, theta_tries, newton_u, newton_sigma) < 1:
        raise ValueError("logit_gibbs needs newton_theta, theta_tries, newton_u and newton_sigma >= 1")
    if not 0.0 <= theta_rho < 1.0:
        raise ValueError(f"logit_gibbs needs 0 <= theta_rho < 1, got {theta_rho}")
    d = design
    cells = _Cells(d)
    rng = np.random.default_rng(random_seed)
    theta0 = _pilot(d, cells)
    T = len(d.crossed_index)
    if T:  # 7. crossed effects start at 0, their scales at half the prior scale
        v = [np.zeros((chains, J)) for J in cells.n_lev]
        csig = np.array([0.5 * float(sd) for sd in d.crossed_sd])[None].repeat(chains, 0)
        cells.offset = np.zeros((chains, len(cells.U)))
        moves = [(shift_basis(d.A, ix, J, d),  # 7b: the directions, and whether the levels are the world groups
                  bool(d.world_effects and J == d.n_world and np.array_equal(ix, d.world)))
                 for ix, J in zip(d.crossed_index, cells.n_lev)] if crossed_moves else None
        sig_start, sig_run = csig.copy(), np.zeros_like(csig)
    s = _start_state(d, cells, theta0, chains, overdispersed, rng)
    n_chain, n_llm, n_world, n_param = s.theta.shape[0], d.n_llm, d.n_world, d.A.shape[1]
    n_pooled = len(d.pooled)
    we = d.world_effects
    out = {"theta": np.empty((n_chain, draws, n_llm, n_param)), "mu": np.empty((n_chain, draws, *s.mu.shape[1:])),
           "tau": np.empty((n_chain, draws, n_pooled))}
    if we:
        out["sigma"] = np.empty((n_chain, draws, n_llm))
        if keep_u:
            out["u"] = np.empty((n_chain, draws, n_llm, n_world))
    acc = {"theta": np.zeros((n_chain, n_llm)), "u": np.zeros(n_chain), "sigma": np.zeros((n_chain, n_llm)),
           "pooled": np.zeros(n_chain), "crossed": np.zeros((n_chain, T))}
    if T:
        out["crossed_sigma"] = np.empty((n_chain, draws, T))
        for t in range(T):
            out[f"crossed_v{t}"] = np.empty((n_chain, draws, cells.n_lev[t]))
    scratch = np.empty_like(s.loglik)  # the log-likelihood of a proposal, by group
    # proposal starting points: the pilot, then (frozen for the kept draws) the mean of the
    # second half of burn-in; a fixed start keeps the proposals independent of the current state
    start = _Starts(theta=np.broadcast_to(theta0, s.theta.shape).copy(), sigma=np.full((n_chain, n_llm), 0.5 * d.sigma_sd),
                    mu=s.mu, log_tau=np.log(s.tau))
    running = _Starts(theta=np.zeros_like(s.theta), sigma=np.zeros((n_chain, n_llm)), mu=np.zeros_like(s.mu),
                      log_tau=np.zeros_like(s.tau))
    n_run = 0
    total = tune + draws
    for it in range(total):
        kept = it >= tune
        if it == tune and n_run:
            start = _Starts(theta=running.theta / n_run, sigma=running.sigma / n_run, mu=running.mu / n_run,
                            log_tau=running.log_tau / n_run)
        acc_theta = _step_theta(s, d, cells, start.theta, newton_theta, theta_tries, theta_rho, scratch, rng)
        if we:
            acc_u = _step_world_effects(s, d, cells, newton_u, scratch, rng)
            _step_translate(s, d, cells, rng)
            _step_sigma_centred(s, d, rng)
            acc_sigma = _step_sigma_noncentred(s, d, cells, start.sigma, newton_sigma, scratch, rng)
        # 5. mu | beta, tau and tau | beta, mu (5'. with a structured mean)
        if d.mean_X is None:
            s.mu, s.tau = update_pooled(s.theta[..., d.pooled], s.tau, d.mu_sd, d.tau_shape, d.tau_rate, rng)
        else:
            s.mu, s.tau = update_pooled_regression(s.theta[..., d.pooled], s.tau, d.mean_X, d.mean_sd, d.tau_shape,
                                                   d.tau_rate, rng)
        if n_pooled and interweave_pooled:
            if it < tune // 2:  # burn-in only: step 6 starts from the current state
                start.mu, start.log_tau = s.mu, np.log(s.tau)
            acc_pooled = _step_pooled_noncentred(s, d, cells, (start.mu, start.log_tau), scratch, rng)
        if T:
            if it < tune // 2:  # burn-in only: the non-centred scale step starts from the current state
                sig_start = csig.copy()
            elif it == tune and tune // 2 < tune:
                sig_start = sig_run / (tune - tune // 2)
            acc_crossed = _step_crossed(s, d, cells, v, csig, newton_crossed, moves, sig_start, rng)
            if tune // 2 <= it < tune:
                sig_run += csig
        if tune // 2 <= it < tune:
            running.theta += s.theta
            running.sigma += s.sigma
            running.mu += s.mu
            running.log_tau += np.log(s.tau)
            n_run += 1
        if kept:
            j = it - tune
            acc["theta"] += acc_theta
            out["theta"][:, j], out["mu"][:, j], out["tau"][:, j] = s.theta, s.mu, s.tau
            if n_pooled and interweave_pooled:
                acc["pooled"] += acc_pooled
            if T:
                acc["crossed"] += acc_crossed
                out["crossed_sigma"][:, j] = csig
                for t in range(T):
                    out[f"crossed_v{t}"][:, j] = v[t]
            if we:
                acc["u"] += acc_u
                acc["sigma"] += acc_sigma
                out["sigma"][:, j] = s.sigma
                if keep_u:
                    out["u"][:, j] = s.u
        if progress is not None:
            progress(it + 1, total)
    if d.mean_X is not None:
        out["mean_coef"] = out.pop("mu")  # chain x draw x R x pooled: beta of the structured mean X beta
    out["accept_theta"] = acc["theta"] / draws
    if n_pooled and interweave_pooled:
        out["accept_pooled"] = acc["pooled"] / draws
    if we:
        out["accept_u"] = acc["u"] / draws
        out["accept_sigma"] = acc["sigma"] / draws
    if T:
        out["accept_crossed"] = acc["crossed"] / draws
    return out
