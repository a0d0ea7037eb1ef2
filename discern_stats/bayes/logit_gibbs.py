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
Proposal starting points (1, 4) are fixed for the kept draws: the pilot mode (and half the
prior scale of sigma) until the middle of burn-in, then the mean of its second half. Only
burn-in, which is discarded, sees them change.

The per-cell passes (linear predictor, gradient and curvature sums, log-likelihood terms)
are fused numba loops; chains are a leading array axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np


@dataclass
class LogitDesign:
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
    mu_sd: float = 2.5
    tau_shape: float = 5.0
    tau_rate: float = 5.0
    sigma_sd: float = 1.0
    world_effects: bool = True

    def __post_init__(self) -> None:
        self.A = np.ascontiguousarray(self.A, float)
        N, P = self.A.shape
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
@numba.njit(cache=True, nogil=True)
def _log1pexp(x: float) -> float:
    return x + np.log1p(np.exp(-x)) if x > 0 else np.log1p(np.exp(x))


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
        keyed = np.column_stack([self.l.astype(float), A])
        pairs, r = np.unique(keyed, axis=0, return_inverse=True)  # sorted by LLM first
        self.pl = np.ascontiguousarray(pairs[:, 0].astype(np.int64))  # the LLM of each pair
        self.U = np.ascontiguousarray(pairs[:, 1:])  # its design row
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


def logit_gibbs(design: LogitDesign, *, draws: int = 1000, tune: int = 100, chains: int = 4,
                random_seed: int | None = 0, newton_theta: int = 1, theta_tries: int = 1, newton_u: int = 1,
                newton_sigma: int = 1, overdispersed: float = 1.3, keep_u: bool = True, theta_rho: float = 0.5,
                progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Sample the posterior of ``design``'s model (see the module docstring).

    Returns arrays with leading (chain, draw) axes: ``theta`` (llm, P), ``mu`` and ``tau``
    (pooled columns), with world effects ``sigma`` (llm) and ``u`` (llm, world), and the
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
    not fit in memory). An independence step cannot leave a start far in the tails:
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
    C, L, W, P = chains, d.n_llm, d.n_world, d.A.shape[1]
    G = len(cells.gstart)
    K = len(d.pooled)
    theta0 = _pilot(d, cells)
    fixed_prec = 1.0 / d.prior_sd ** 2
    we = d.world_effects
    gidx = cells.gidx
    # state: theta at the pilot mode, mu at its pooled columns, tau at its prior mean, u = 0; with
    # ``overdispersed`` each chain starts elsewhere (see the docstring)
    theta = np.broadcast_to(theta0, (C, L, P)).copy()
    mu = theta0[:, d.pooled].mean(axis=0) + 0.1 * rng.standard_normal((C, K))
    tau = np.full((C, K), d.tau_shape / d.tau_rate)
    sigma = np.full((C, L), 0.5 * d.sigma_sd)
    ug = np.zeros((C, G))  # world effects of the (LLM, world) groups with cells; stay 0 without them
    u = np.zeros((C, L, W))
    if overdispersed:
        # theta: a draw from the Laplace approximation at the pilot mode with its spread times
        # ``overdispersed``: apart, yet not so far into its tails that an independence step never leaves
        tau = rng.gamma(d.tau_shape, 1.0 / d.tau_rate, size=(C, K))
        prec = np.broadcast_to(1.0 / d.prior_sd ** 2, (C, L, P)).copy()
        mean = np.broadcast_to(d.prior_mean, (C, L, P)).copy()
        prec[..., d.pooled] = (1.0 / tau ** 2)[:, None, :]
        mean[..., d.pooled] = mu[:, None, :]
        grad, H = _theta_newton_terms(theta, cells, ug, cells.gidx, prec, mean)
        centre = theta + np.linalg.solve(H, grad[..., None])[..., 0]
        chol = np.linalg.cholesky(H)
        theta = centre + overdispersed * np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, L, P))[..., None])[..., 0]
        sigma = sigma * rng.uniform(0.5, 1.5, size=(C, L))
    ll = np.empty((C, G))  # log-likelihood of the current state, by group
    _loglik_groups(_table(theta, cells), cells.lr, ug, gidx, cells.k, cells.n, ll)
    out = {"theta": np.empty((C, draws, L, P)), "mu": np.empty((C, draws, K)), "tau": np.empty((C, draws, K))}
    if we:
        out["sigma"] = np.empty((C, draws, L))
        if keep_u:
            out["u"] = np.empty((C, draws, L, W))
    acc_theta = np.zeros((C, L))
    acc_u = np.zeros(C)
    acc_sigma = np.zeros((C, L))
    ll_new = np.empty((C, G))
    # proposal starting points: the pilot, then (frozen for the kept draws) the mean of the
    # second half of burn-in; a fixed start keeps the proposals independent of the current state
    start_theta = np.broadcast_to(theta0, (C, L, P)).copy()
    start_sigma = np.full((C, L), 0.5 * d.sigma_sd)
    run_theta, run_sigma, n_run = np.zeros((C, L, P)), np.zeros((C, L)), 0
    total = tune + draws
    for it in range(total):
        if it == tune and n_run:
            start_theta, start_sigma = run_theta / n_run, run_sigma / n_run
        # 1. theta | u: independence MH with a Newton proposal from the fixed start
        prec = np.broadcast_to(fixed_prec, (C, L, P)).copy()
        mean = np.broadcast_to(d.prior_mean, (C, L, P)).copy()
        prec[..., d.pooled] = (1.0 / tau ** 2)[:, None, :]
        mean[..., d.pooled] = mu[:, None, :]
        m = start_theta
        for _ in range(newton_theta):
            grad, H = _theta_newton_terms(m, cells, ug, gidx, prec, mean)
            m = m + np.linalg.solve(H, grad[..., None])[..., 0]
        chol = np.linalg.cholesky(H)  # H = chol chol'; draw m + chol'^-1 z
        for tr in range(theta_tries):  # repeated MH steps, each leaving p(theta | u) invariant
            # even tries: independence proposal; odd tries: autoregressive (rho > 0), local to theta
            rho = theta_rho if tr % 2 == 1 else 0.0
            zdraw = np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, L, P))[..., None])[..., 0]
            prop = m + rho * (theta - m) + np.sqrt(1.0 - rho ** 2) * zdraw
            _loglik_groups(_table(prop, cells), cells.lr, ug, gidx,
                           cells.k, cells.n, ll_new)
            lp_new = np.add.reduceat(ll_new, cells.glstart, axis=1) - 0.5 * (prec * (prop - mean) ** 2).sum(-1)
            lp_old = np.add.reduceat(ll, cells.glstart, axis=1) - 0.5 * (prec * (theta - mean) ** 2).sum(-1)
            dq_new = np.einsum("clp,clpq,clq->cl", prop - m, H, prop - m)
            dq_old = np.einsum("clp,clpq,clq->cl", theta - m, H, theta - m)
            log_a = lp_new - lp_old + 0.5 * (dq_new - dq_old)  # the same ratio for any rho (see 1.)
            ok = np.log(rng.random((C, L))) < log_a
            theta = np.where(ok[..., None], prop, theta)
            ll = np.where(ok[:, cells.gl], ll_new, ll)
            if it >= tune:
                acc_theta += ok / theta_tries
        if we:
            # 2. u | theta: independence MH per world group, Newton proposal from 0
            tab = _table(theta, cells)
            iv2 = 1.0 / sigma[:, cells.gl] ** 2
            mg = np.zeros((C, G))
            for _ in range(newton_u):
                res = np.zeros((C, G))
                h = np.zeros((C, G))
                _sums_by(tab, cells.lr, mg, gidx, gidx, cells.k, cells.n, res, h)
                h += iv2
                mg = mg + (res - iv2 * mg) / h
            up = mg + rng.standard_normal((C, G)) / np.sqrt(h)
            _loglik_groups(tab, cells.lr, up, gidx, cells.k, cells.n, ll_new)
            log_a = (ll_new - 0.5 * iv2 * up ** 2 - ll + 0.5 * iv2 * ug ** 2
                     + 0.5 * h * ((up - mg) ** 2 - (ug - mg) ** 2))
            ok = np.log(rng.random((C, G))) < log_a
            ug = np.where(ok, up, ug)
            ll = np.where(ok, ll_new, ll)
            if it >= tune:
                acc_u += ok.mean(axis=1)
            u = sigma[:, :, None] * rng.standard_normal((C, L, W))  # worlds an LLM never saw: prior
            u[:, cells.gl, cells.gw] = ug
            # 3. translation move: alpha[l] + c, u[l] - c (every eta unchanged)
            if len(d.intercepts):
                pa = fixed_prec[d.intercepts]
                a = theta[..., d.intercepts]
                cprec = pa.sum() + W / sigma ** 2
                cmean = (((d.prior_mean[d.intercepts] - a) * pa).sum(-1) + u.sum(axis=2) / sigma ** 2) / cprec
                shift = cmean + rng.standard_normal((C, L)) / np.sqrt(cprec)
                theta[..., d.intercepts] += shift[..., None]
                u -= shift[..., None]
                ug = u[:, cells.gl, cells.gw]
            # 4a. sigma | u: log p(x = log sigma) = -e^2x / (2 s0^2) - W x - SS e^-2x / 2 + x
            ss = (u ** 2).sum(axis=2)
            s2 = d.sigma_sd ** 2
            sigma = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s2) - (W - 1) * x - 0.5 * ss * np.exp(-2 * x),
                                      np.log(sigma), 1.0, rng))
            # 4b. sigma | z = u / sigma, theta (non-centred; interweaving): independence MH with a
            # Newton proposal of log p(sigma | z) = loglik(e + sigma z) - sigma^2 / (2 s0^2)
            z = u / sigma[..., None]
            zg = z[:, cells.gl, cells.gw]
            tab = _table(theta, cells)  # intercepts moved in step 3
            ms = start_sigma
            for _ in range(newton_sigma):
                res = np.zeros((C, L))
                hs = np.zeros((C, L))
                _sums_by_llm_scaled(tab, cells.lr, ms, zg, gidx, cells.l, cells.k, cells.n, res, hs)
                hs += 1.0 / s2
                ms = ms + (res - ms / s2) / hs
            sp = ms + rng.standard_normal((C, L)) / np.sqrt(hs)
            pos = sp > 0  # the target is 0 below 0: such proposals are rejected
            sp_safe = np.where(pos, sp, sigma)
            _loglik_groups(tab, cells.lr, sp_safe[:, cells.gl] * zg, gidx, cells.k, cells.n, ll_new)
            log_a = (np.add.reduceat(ll_new, cells.glstart, axis=1) - 0.5 * sp_safe ** 2 / s2
                     - np.add.reduceat(ll, cells.glstart, axis=1) + 0.5 * sigma ** 2 / s2
                     + 0.5 * hs * ((sp_safe - ms) ** 2 - (sigma - ms) ** 2))
            ok = pos & (np.log(rng.random((C, L))) < log_a)
            if it >= tune:
                acc_sigma += ok
            sigma = np.where(ok, sp_safe, sigma)
            ll = np.where(ok[:, cells.gl], ll_new, ll)
            u = sigma[..., None] * z
            ug = u[:, cells.gl, cells.gw]
        # 5. mu | beta, tau and tau | beta, mu
        mu, tau = update_pooled(theta[..., d.pooled], tau, d.mu_sd, d.tau_shape, d.tau_rate, rng)
        if tune // 2 <= it < tune:
            run_theta += theta
            run_sigma += sigma
            n_run += 1
        if it >= tune:
            j = it - tune
            out["theta"][:, j], out["mu"][:, j], out["tau"][:, j] = theta, mu, tau
            if we:
                out["sigma"][:, j] = sigma
                if keep_u:
                    out["u"][:, j] = u
        if progress is not None:
            progress(it + 1, total)
    out["accept_theta"] = acc_theta / draws
    if we:
        out["accept_u"] = acc_u / draws
        out["accept_sigma"] = acc_sigma / draws
    return out
