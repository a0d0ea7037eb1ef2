"""Gibbs sampler for hierarchical normal linear models (the normal family of `spec.HierarchicalGLM`).

    y_c ~ N(a_c' theta[l_c] + u[l_c, g_c], s[l_c])
    theta[l, j] ~ N(m_j, s_j) (fixed-prior columns) or N(mu_j, tau_j) (pooled columns)
    mu_j ~ N(0, mu_sd), tau_j ~ Gamma(tau_shape, tau_rate)
    u[l, g] = sigma[l] z[l, g], z ~ N(0, 1), sigma[l] ~ HalfNormal(sigma_sd); s[l] ~ HalfNormal(resid_sd)

Every step is an exact conditional draw (no accept/reject), in this order:

1. theta[l] | u, s, mu, tau: normal, precision A_l'A_l / s_l^2 + diag(prior precision), with
   A_l'A_l computed once (a sufficient statistic of the cells).
2. u[l, g] | theta, s, sigma: normal, one per group (residual sums per group).
3. Translation move (Liu & Sabatti 2000): intercepts + c, u - c leaves every mean unchanged, so
   c | rest is normal from the priors alone; removes the intercept / mean-group-effect correlation.
4. sigma[l] interweaved (ASIS; Yu & Meng 2011): given u (slice sampler on log sigma), then given
   z = u / sigma (normal in sigma, truncated to sigma > 0).
5. s[l] | rest (slice sampler on log s), then mu, tau as in `logit_gibbs.update_pooled`.
6. mu, tau interweaved (ASIS; Yu & Meng 2011): given z = (theta_pooled - mu) / tau the outcome is
   linear in (mu, tau), r_c = sum_j A_cj (mu_j + tau_j z[l_c, j]) + e_c, so mu | z, tau, rest is
   normal (exact draw) and each tau_j | z, mu, rest has log density
   -Q_jj tau_j^2 / 2 + b_j tau_j + (shape - 1) log tau_j - rate tau_j (slice sampler on log tau_j),
   from sums per unit of A'A / s^2 (computed once) and A' r / s^2. The centred step 5 alone stalls
   when tau is small against the data's precision (the units barely differ).

With a structured pooled mean (``mean_X``, ``mean_sd``: theta[l, j] ~ N((X beta)[l, j], tau_j),
beta[r, j] ~ N(0, mean_sd[r]); `logit_gibbs` 5', 6') steps 5 and 6 read:

5'. beta | theta, tau: conjugate normal regression (`logit_gibbs.update_pooled_regression`), then tau.
6'. (beta, tau) | z = (theta_pooled - X beta) / tau: r_c = sum_j A_cj ((X beta)[l_c, j] + tau_j z[l_c, j]) + e_c
   is linear in beta, so beta | z, tau, rest is normal (precision sum_l (X_l X_l') kron G_l +
   diag(1 / mean_sd^2), G_l = A_l'A_l / s_l^2 on the pooled columns) and each tau_j as in 6.

The ``centered`` setting of the spec concerns the PyMC build only: this sampler updates
(mu, tau) in both parameterisations every sweep.

7. With crossed effects (``crossed_index``; `spec.HierarchicalGLM` crossed): every step above
   reads y - o, o_c = sum_t v_t[level_t(c)] (exact given o); then for each effect t in turn
   v_t[j] | rest is normal, precision sum_{c in j} 1 / s[l_c]^2 + 1 / sigma_t^2, mean its inverse
   times sum_{c in j} e_c / s[l_c]^2 (e the residual without v_t); 7b. the translation moves of
   `crossed_moves` (intercepts and level-constant slopes against v_t; for an effect on the groups,
   u[., j] against v_t[j]; every mean unchanged, c | rest normal from the priors); 7c. sigma_t
   interweaved: | v_t by the slice sampler of 4a (J_t levels), then | z_t = v_t / sigma_t normal,
   truncated at 0 (as 4b). Without crossed effects nothing changes (bit-identical draws).

Group effects of groups a unit never saw are integrated out (they are not tracked); the mean of
their prior is 0, so nothing reported depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy import special

from .hyperpriors import PoolingPriors
from .crossed_moves import nested_shift, shift_basis, translate
from .logit_gibbs import _slice_log, check_mean_design, pooled_mean, update_pooled, update_pooled_regression


@dataclass
class GaussDesign(PoolingPriors):
    A: np.ndarray
    unit: np.ndarray
    group: np.ndarray
    y: np.ndarray
    n_unit: int
    n_group: int
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    pooled: np.ndarray
    intercepts: np.ndarray
    resid_sd: float = 1.0
    group_effects: bool = True
    mean_X: np.ndarray | None = None  # units x R: a structured pooled mean X beta (module docstring, 5', 6')
    mean_sd: np.ndarray | None = None  # R: the prior SD of each beta_r
    crossed_index: list = field(default_factory=list)  # per crossed effect: the level of every cell (step 7)
    crossed_sd: list = field(default_factory=list)  # per crossed effect: the HalfNormal scale of its sigma

    def __post_init__(self) -> None:
        self.A = np.ascontiguousarray(self.A, float)
        N = len(self.A)
        self.unit = np.asarray(self.unit, np.int64)
        self.group = np.asarray(self.group, np.int64)
        self.y = np.asarray(self.y, float)
        if N == 0 or self.unit.shape != (N,) or self.group.shape != (N,) or self.y.shape != (N,):
            raise ValueError("GaussDesign: A, unit, group and y need one entry per cell (and at least one cell)")
        if not np.isfinite(self.y).all():
            raise ValueError("GaussDesign: y must be finite")
        if len(np.unique(self.unit)) != self.n_unit:
            raise ValueError("GaussDesign: every unit needs at least one cell")
        self.pooled = np.asarray(self.pooled, np.int64)
        self.intercepts = np.asarray(self.intercepts, np.int64)
        check_mean_design(self, self.n_unit, "GaussDesign")


def _pooled_noncentred(theta, mu, tau, target, s, A, ul, lstart, AtA, d: GaussDesign, rng):
    """Step 6 of the module docstring. ``target`` (C x N) is y - u; returns (theta with its pooled
    columns at mu' + tau' z, mu', tau')."""
    J = d.pooled
    C, L, _ = theta.shape
    K = len(J)
    z = (theta[..., J] - mu[:, None, :]) / tau[:, None, :]  # C x L x K
    fixed = np.setdiff1d(np.arange(theta.shape[-1]), J)
    r = target - np.einsum("np,cnp->cn", A[:, fixed], theta[:, ul][..., fixed])  # outcome less the fixed columns
    w = 1.0 / s ** 2  # C x L
    AJ = A[:, J]
    Ar = np.add.reduceat(r[:, :, None] * AJ[None], lstart, axis=1) * w[..., None]  # C x L x K: A_l' r_l / s_l^2
    G = AtA[:, J][:, :, J][None] * w[..., None, None]  # C x L x K x K: A_l' A_l / s_l^2
    # r_l = A_l (mu + z_l * tau) + e: with M_l = [I | diag(z_l)], Q = sum_l M_l' G_l M_l, b = sum_l M_l' Ar_l
    Qmm = G.sum(axis=1)
    Qmt = np.einsum("cljk,clk->cjk", G, z)  # d^2 / dmu_j dtau_k
    Qtt = np.einsum("clj,cljk,clk->cjk", z, G, z)
    bm = Ar.sum(axis=1)
    bt = (Ar * z).sum(axis=1)
    # mu | tau, z: normal
    prec = Qmm + np.eye(K) / d.mu_sd ** 2
    lin = bm - np.einsum("cjk,ck->cj", Qmt, tau)
    chol = np.linalg.cholesky(prec)
    mu = np.linalg.solve(prec, lin[..., None])[..., 0] \
        + np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, K))[..., None])[..., 0]
    # tau_j | mu, tau_-j, z: slice sampler on x = log tau_j (Jacobian e^x)
    tau = tau.copy()
    for j in range(K):
        q = Qtt[:, j, j]
        bj = bt[:, j] - np.einsum("ck,ck->c", Qmt[:, :, j], mu) - np.einsum("ck,ck->c", Qtt[:, j], tau) + q * tau[:, j]
        x = _slice_log(lambda x: -0.5 * q * np.exp(2 * x) + bj * np.exp(x) + d.tau_shape * x - d.tau_rate * np.exp(x),
                       np.log(tau[:, j]), 1.0, rng)
        tau[:, j] = np.exp(x)
    theta = theta.copy()
    theta[..., J] = mu[:, None, :] + tau[:, None, :] * z
    return theta, mu, tau


def _pooled_noncentred_regression(theta, coef, tau, target, s, A, ul, lstart, AtA, d: GaussDesign, rng):
    """Step 6' of the module docstring: as `_pooled_noncentred` with the structured mean X coef
    (coef: C x R x K) in place of mu; returns (theta, coef', tau')."""
    J, X, sd = d.pooled, d.mean_X, d.mean_sd
    C, L, _ = theta.shape
    K, R = len(J), X.shape[1]
    RK = R * K
    z = (theta[..., J] - np.einsum("lr,crk->clk", X, coef)) / tau[:, None, :]  # C x L x K
    fixed = np.setdiff1d(np.arange(theta.shape[-1]), J)
    r = target - np.einsum("np,cnp->cn", A[:, fixed], theta[:, ul][..., fixed])
    w = 1.0 / s ** 2
    AJ = A[:, J]
    Ar = np.add.reduceat(r[:, :, None] * AJ[None], lstart, axis=1) * w[..., None]  # C x L x K
    G = AtA[:, J][:, :, J][None] * w[..., None, None]  # C x L x K x K
    # r_l = A_l (X_l coef + z_l * tau) + e: quadratic in (coef, tau)
    Qcc = np.einsum("lr,ls,cljk->crjsk", X, X, G).reshape(C, RK, RK)
    Qct = np.einsum("lr,cljk,clk->crjk", X, G, z).reshape(C, RK, K)  # d^2 / dcoef_rj dtau_k
    Qtt = np.einsum("clj,cljk,clk->cjk", z, G, z)
    bc = np.einsum("lr,clk->crk", X, Ar).reshape(C, RK)
    bt = (Ar * z).sum(axis=1)
    prec = Qcc + np.diag(np.repeat(1.0 / sd ** 2, K))
    lin = bc - np.einsum("cik,ck->ci", Qct, tau)
    chol = np.linalg.cholesky(prec)
    cf = np.linalg.solve(prec, lin[..., None])[..., 0] \
        + np.linalg.solve(np.swapaxes(chol, -1, -2), rng.standard_normal((C, RK))[..., None])[..., 0]
    tau = tau.copy()
    for j in range(K):
        q = Qtt[:, j, j]
        bj = bt[:, j] - np.einsum("ci,ci->c", Qct[:, :, j], cf) - np.einsum("ck,ck->c", Qtt[:, j], tau) + q * tau[:, j]
        x = _slice_log(lambda x: -0.5 * q * np.exp(2 * x) + bj * np.exp(x) + d.tau_shape * x - d.tau_rate * np.exp(x),
                       np.log(tau[:, j]), 1.0, rng)
        tau[:, j] = np.exp(x)
    coef = cf.reshape(C, R, K)
    theta = theta.copy()
    theta[..., J] = np.einsum("lr,crk->clk", X, coef) + tau[:, None, :] * z
    return theta, coef, tau


def gauss_gibbs(design: GaussDesign, *, draws: int = 1000, tune: int = 200, chains: int = 4,
                random_seed: int | None = 0, keep_u: bool = True, overdispersed: float = 1.3,
                interweave_pooled: bool = True, crossed_moves: bool = True, progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Sample the posterior of ``design``'s model (module docstring). Returns ``theta`` (chain,
    draw, unit, P), ``mu`` (with a structured mean ``mean_coef``, chain x draw x R x K), ``tau``, ``resid_sd`` and, with group effects, ``sigma`` and (with
    ``keep_u``) ``u`` (unit, group). Chains start overdispersed: theta from its least-squares
    conditional with the spread times ``overdispersed``, the scales drawn around 1.
    ``interweave_pooled=False`` leaves out step 6 (the centred (mu, tau) step alone; for comparison),
    ``crossed_moves=False`` steps 7b and the non-centred half of 7c (likewise)."""
    if draws < 1 or tune < 0 or chains < 1:
        raise ValueError("gauss_gibbs needs draws >= 1, tune >= 0 and chains >= 1")
    d = design
    rng = np.random.default_rng(random_seed)
    order = np.lexsort((d.group, d.unit))
    A, y, ul, gw = d.A[order], d.y[order], d.unit[order], d.group[order]
    N, P = A.shape
    C, L, K = chains, d.n_unit, len(d.pooled)
    key = ul * d.n_group + gw
    gstart = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    gidx = np.cumsum(np.r_[False, key[1:] != key[:-1]])
    G = len(gstart)
    gl, gg = ul[gstart], gw[gstart]
    n_g = np.bincount(gidx, minlength=G).astype(float)
    n_l = np.bincount(ul, minlength=L).astype(float)
    G_l = np.bincount(gl, minlength=L).astype(float)
    lstart = np.flatnonzero(np.r_[True, ul[1:] != ul[:-1]])
    AtA = np.add.reduceat(A[:, :, None] * A[:, None, :], lstart, axis=0)  # L x P x P
    ge = d.group_effects
    fixed_prec = 1.0 / d.prior_sd ** 2
    diag = np.arange(P)

    def theta_draw(resid_target, s, mu, tau, spread=1.0):
        """theta | rest, resid_target = y - u (C x N)."""
        prec = np.broadcast_to(fixed_prec, (C, L, P)).copy()
        mean = np.broadcast_to(d.prior_mean, (C, L, P)).copy()
        prec[..., d.pooled] = (1.0 / tau ** 2)[:, None, :]
        mean[..., d.pooled] = pooled_mean(mu, d)
        Aty = np.add.reduceat(resid_target[:, :, None] * A[None], lstart, axis=1)  # C x L x P
        Q = AtA[None] / (s ** 2)[..., None, None]
        Q[..., diag, diag] += prec
        b = Aty / (s ** 2)[..., None] + prec * mean
        chol = np.linalg.cholesky(Q)
        m = np.linalg.solve(Q, b[..., None])[..., 0]
        z = rng.standard_normal((C, L, P))
        return m + spread * np.linalg.solve(np.swapaxes(chol, -1, -2), z[..., None])[..., 0]

    s = np.ones((C, L)) * (rng.uniform(0.5, 1.5, (C, L)) if overdispersed else 1.0)
    sigma = 0.5 * d.sigma_sd * (rng.uniform(0.5, 1.5, (C, L)) if overdispersed else np.ones((C, L)))
    tau = rng.gamma(d.tau_shape, 1.0 / d.tau_rate, (C, K)) if overdispersed else np.full((C, K), d.tau_shape / d.tau_rate)
    mu = rng.normal(0.0, 0.1, (C, K) if d.mean_X is None else (C, d.mean_X.shape[1], K))  # with mean_X: beta
    ug = np.zeros((C, G))
    T = len(d.crossed_index)
    lev = [np.asarray(ix, np.int64)[order] for ix in d.crossed_index]
    n_lev = [int(ix.max()) + 1 for ix in lev]
    v = [np.zeros((C, J)) for J in n_lev]
    csig = np.array([0.5 * float(sd) for sd in d.crossed_sd])[None].repeat(C, 0) if T else np.zeros((C, 0))
    moves = [(shift_basis(d.A, ix, J, d),  # 7b: the directions, and whether the levels are the nested groups
              bool(ge and J == d.n_group and np.array_equal(ix, d.group))) for ix, J in zip(d.crossed_index, n_lev)] \
        if crossed_moves else None
    theta = theta_draw(np.broadcast_to(y, (C, N)), s, mu, tau, spread=overdispersed or 1.0)
    out = {"theta": np.empty((C, draws, L, P)), "mu": np.empty((C, draws, *mu.shape[1:])), "tau": np.empty((C, draws, K)),
           "resid_sd": np.empty((C, draws, L))}
    if ge:
        out["sigma"] = np.empty((C, draws, L))
        if keep_u:
            out["u"] = np.zeros((C, draws, L, d.n_group))
    if T:
        out["crossed_sigma"] = np.empty((C, draws, T))
        for t in range(T):
            out[f"crossed_v{t}"] = np.empty((C, draws, n_lev[t]))
    total = tune + draws
    for it in range(total):
        yo = y[None] - sum(v[t][:, lev[t]] for t in range(T)) if T else y[None]  # 7. y less the crossed offset
        # 1. theta | u, s, mu, tau
        theta = theta_draw(yo - ug[:, gidx], s, mu, tau)
        fit = np.einsum("np,cnp->cn", A, theta[:, ul])
        r = yo - fit  # C x N
        if ge:
            # 2. u | theta, s, sigma
            sr = np.add.reduceat(r, gstart, axis=1)
            s2g = s[:, gl] ** 2
            prec = n_g / s2g + 1.0 / sigma[:, gl] ** 2
            ug = (sr / s2g) / prec + rng.standard_normal((C, G)) / np.sqrt(prec)
            # 3. translation: intercepts + c, u - c
            if len(d.intercepts):
                pa = fixed_prec[d.intercepts]
                a = theta[..., d.intercepts]
                usum = np.stack([np.bincount(gl, weights=ug[c], minlength=L) for c in range(C)])
                cprec = pa.sum() + G_l / sigma ** 2
                cmean = (((d.prior_mean[d.intercepts] - a) * pa).sum(-1) + usum / sigma ** 2) / cprec
                shift = cmean + rng.standard_normal((C, L)) / np.sqrt(cprec)
                theta[..., d.intercepts] += shift[..., None]
                ug = ug - shift[:, gl]
                r = r - shift[:, ul]
            # 4a. sigma | u (centred)
            ss = np.stack([np.bincount(gl, weights=ug[c] ** 2, minlength=L) for c in range(C)])
            s02 = d.sigma_sd ** 2
            sigma = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s02) - (G_l - 1) * x - 0.5 * ss * np.exp(-2 * x),
                                      np.log(sigma), 1.0, rng))
            # 4b. sigma | z (non-centred): r_c = sigma z_g + e_c, normal in sigma, truncated at 0
            z = ug / sigma[:, gl]
            zc = z[:, gidx]
            s2 = s[:, ul] ** 2
            pz = np.stack([np.bincount(ul, weights=zc[c] ** 2 / s2[c], minlength=L) for c in range(C)]) + 1.0 / s02
            mz = np.stack([np.bincount(ul, weights=zc[c] * r[c] / s2[c], minlength=L) for c in range(C)]) / pz
            sd_z = 1.0 / np.sqrt(pz)
            # truncated normal by inversion, x = -Phi^-1(U Phi(mz / sd)): stable in both tails
            sigma = mz - sd_z * special.ndtri(rng.random(mz.shape) * special.ndtr(mz / sd_z))
            ug = sigma[:, gl] * z
            e = r - ug[:, gidx]
        else:
            e = r
        # 5. s | rest, then mu, tau
        sse = np.stack([np.bincount(ul, weights=e[c] ** 2, minlength=L) for c in range(C)])
        r02 = d.resid_sd ** 2
        s = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * r02) - (n_l - 1) * x - 0.5 * sse * np.exp(-2 * x),
                              np.log(s), 1.0, rng))
        if K and d.mean_X is None:
            mu, tau = update_pooled(theta[..., d.pooled], tau, d.mu_sd, d.tau_shape, d.tau_rate, rng)
        elif K:  # 5'. the structured mean
            mu, tau = update_pooled_regression(theta[..., d.pooled], tau, d.mean_X, d.mean_sd, d.tau_shape, d.tau_rate,
                                               rng)
        if K and interweave_pooled:  # 6. (mu, tau) | z, rest: the non-centred half of the interweaving
            step = _pooled_noncentred if d.mean_X is None else _pooled_noncentred_regression
            theta, mu, tau = step(theta, mu, tau, yo - ug[:, gidx], s, A, ul, lstart, AtA, d, rng)
        if T:  # 7. v_t | rest (conjugate normal per level); 7b. translations; 7c. sigma_t interweaved
            e = yo - np.einsum("np,cnp->cn", A, theta[:, ul]) - (ug[:, gidx] if ge else 0.0)
            w_c = 1.0 / s[:, ul] ** 2
            for t in range(T):
                e = e + v[t][:, lev[t]]  # the residual without v_t
                prec = np.stack([np.bincount(lev[t], weights=w_c[c], minlength=n_lev[t]) for c in range(C)]) \
                    + 1.0 / csig[:, t, None] ** 2
                lin = np.stack([np.bincount(lev[t], weights=w_c[c] * e[c], minlength=n_lev[t]) for c in range(C)])
                v[t] = lin / prec + rng.standard_normal((C, n_lev[t])) / np.sqrt(prec)
                if moves is None:  # crossed_moves=False: v_t and the centred sigma_t step only
                    e = e - v[t][:, lev[t]]
                    sst, s02t = (v[t] ** 2).sum(1), float(d.crossed_sd[t]) ** 2
                    csig[:, t] = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s02t) - (n_lev[t] - 1) * x
                                                   - 0.5 * sst * np.exp(-2 * x), np.log(csig[:, t]), 1.0, rng))
                    continue
                basis, nested = moves[t]
                before = theta.copy()
                translate(theta, mu, v[t], csig[:, t], basis, d, rng)
                e = e - np.einsum("np,cnp->cn", A, theta[:, ul] - before[:, ul])  # v_t's share of the shift
                if nested:
                    shift = nested_shift(ug, sigma[:, gl], gg, v[t], csig[:, t], rng)
                    ug = ug + shift[:, gg]
                    v[t] = v[t] - shift
                    e = e - shift[:, lev[t]]
                sst, s02t = (v[t] ** 2).sum(1), float(d.crossed_sd[t]) ** 2
                csig[:, t] = np.exp(_slice_log(lambda x: -np.exp(2 * x) / (2 * s02t) - (n_lev[t] - 1) * x
                                               - 0.5 * sst * np.exp(-2 * x), np.log(csig[:, t]), 1.0, rng))
                # sigma_t | z_t: e_c = sigma_t z_t[level_c] + noise, normal in sigma_t, truncated at 0 (as 4b)
                zt = v[t] / csig[:, t, None]
                zc = zt[:, lev[t]]
                pz = (zc ** 2 * w_c).sum(1) + 1.0 / s02t
                mz = (zc * e * w_c).sum(1) / pz
                sd_z = 1.0 / np.sqrt(pz)
                csig[:, t] = mz - sd_z * special.ndtri(rng.random(C) * special.ndtr(mz / sd_z))
                v[t] = csig[:, t, None] * zt
                e = e - v[t][:, lev[t]]
        if it >= tune:
            j = it - tune
            out["theta"][:, j], out["mu"][:, j], out["tau"][:, j], out["resid_sd"][:, j] = theta, mu, tau, s
            if ge:
                out["sigma"][:, j] = sigma
                if keep_u:
                    out["u"][:, j][:, gl, gg] = ug
            if T:
                out["crossed_sigma"][:, j] = csig
                for t in range(T):
                    out[f"crossed_v{t}"][:, j] = v[t]
        if progress is not None:
            progress(it + 1, total)
    if d.mean_X is not None:
        out["mean_coef"] = out.pop("mu")  # chain x draw x R x K: beta of the structured mean X beta
    return out
