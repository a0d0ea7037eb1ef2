"""Translation moves for crossed effects, shared by both Gibbs samplers (issue 25.2; step 7b of
`logit_gibbs` and `gauss_gibbs`).

A crossed effect v[j] (e.g. (1 | source)) is confounded with the coefficients that are constant
within its levels: every unit's intercept, and the slope of a predictor that varies only between
the levels (reliability and popularity are properties of a source). For a shift c = (c0, c_k):

    intercepts a[l] + c0 (every unit),  slopes b[l, k] + c_k (every unit; their pooled mean too),
    v[j] - c0 - sum_k c_k x[j, k]

leaves every linear predictor unchanged (each cell has exactly one intercept column equal to 1 and
x[j, k] is its level's value of column k), so by Liu & Sabatti (2000, "Generalised Gibbs sampler
and multigrid Monte Carlo", JASA 95:1066; the translation group, Jacobian 1) c | rest is drawn from
the priors alone, and here they are Gaussian in c:

    a[l, i] ~ N(m_i, s_i),  mu_k ~ N(0, mu_sd) (with a structured mean X beta: beta + c_k d, X d = 1,
    beta[r] ~ N(0, mean_sd[r])),  a fixed-prior slope b[l, k] ~ N(m_k, s_k),  v[j] ~ N(0, sigma_v)

so c ~ N(M^-1 h, M^-1) with M = X_v'X_v / sigma_v^2 + the priors' precisions and h = X_v'v / sigma_v^2
+ their linear terms (X_v: J x D, a column of ones and the level values x[., k]). With hundreds of
data-rich sources the v[j] conditionals are narrow, so one-at-a-time updates move the population
slope along this ridge by a random walk; this move crosses it in one step.

A crossed effect whose levels are the nested group effect's groups (the item effect shared by every
LLM x strategy beside the nested (1 | LLM:strategy:item)) has a second ridge per level j:
u[l, j] + c_j for every unit l with cells at j, w[j] - c_j, c_j | rest normal from
u[l, j] ~ N(0, sigma[l]) and w[j] ~ N(0, sigma_w) (`nested_shift`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShiftBasis:
    """The directions of one crossed effect's translation move: ``X`` (levels x D) the level design
    (column 0 ones when ``intercept``, then one column per shifted design column ``cols``),
    ``pooled_pos`` the position of each shifted column among the pooled ones (-1: fixed prior), and
    ``mean_dir`` the d with X_mean d = 1 of a structured pooled mean (None without one)."""

    X: np.ndarray
    intercept: bool
    cols: np.ndarray
    pooled_pos: np.ndarray
    mean_dir: np.ndarray | None


def shift_basis(A: np.ndarray, level: np.ndarray, n_levels: int, d) -> ShiftBasis:
    """The translation directions of a crossed effect with levels ``level`` (one per row of ``A``)
    in design ``d`` (a `logit_gibbs.LogitDesign` or `gauss_gibbs.GaussDesign`): the intercepts (when
    every cell has exactly one and none is pooled) and every other design column constant within
    each level, kept while the level design stays of full rank. A pooled column is shifted with its
    pooled mean, so it is left out when a structured mean cannot shift every unit alike."""
    level = np.asarray(level, np.int64)
    counts = np.bincount(level, minlength=n_levels).astype(float)
    have = counts > 0
    pooled = [int(k) for k in np.asarray(d.pooled)]
    intercepts = [int(k) for k in np.asarray(d.intercepts)]
    intercept = bool(intercepts) and not set(intercepts) & set(pooled)
    mean_dir = None
    pooled_ok = True
    if d.mean_X is not None:
        mean_dir = np.linalg.lstsq(d.mean_X, np.ones(len(d.mean_X)), rcond=None)[0]
        pooled_ok = bool(np.allclose(d.mean_X @ mean_dir, 1.0, atol=1e-9))
    Xcols = [np.ones(n_levels)] if intercept else []
    cols, pos = [], []
    for k in range(A.shape[1]):
        if k in intercepts or (k in pooled and not pooled_ok):
            continue
        col = A[:, k]
        by_level = np.bincount(level, weights=col, minlength=n_levels) / np.maximum(counts, 1.0)
        if np.abs(col - by_level[level]).max() > 1e-12 * (1.0 + np.abs(col).max()):
            continue  # varies within a level: a shift of this slope would change the linear predictors
        cand = np.column_stack([*Xcols, np.where(have, by_level, 0.0)])
        if np.linalg.matrix_rank(cand[have]) < cand.shape[1]:
            continue
        Xcols.append(cand[:, -1])
        cols.append(k)
        pos.append(pooled.index(k) if k in pooled else -1)
    X = np.column_stack(Xcols) if Xcols else np.zeros((n_levels, 0))
    return ShiftBasis(X=X, intercept=intercept, cols=np.array(cols, np.int64), pooled_pos=np.array(pos, np.int64),
                      mean_dir=mean_dir)


def shift_moments(theta: np.ndarray, mu: np.ndarray, v: np.ndarray, sigma_v: np.ndarray, basis: ShiftBasis,
                  d) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian of c | rest (module docstring), per chain: log p(c) = -c'Mc / 2 + h'c + const.
    Returns M (chain x D x D) and h (chain x D)."""
    X = basis.X
    L = theta.shape[1]
    iv2 = 1.0 / sigma_v ** 2
    M = iv2[:, None, None] * (X.T @ X)[None]
    h = iv2[:, None] * (v @ X)
    off = 0
    if basis.intercept:
        ic = np.asarray(d.intercepts, np.int64)
        pa = 1.0 / d.prior_sd[ic] ** 2
        M[:, 0, 0] += L * pa.sum()
        h[:, 0] += ((d.prior_mean[ic] - theta[..., ic]) * pa).sum((1, 2))
        off = 1
    for q, (k, j) in enumerate(zip(basis.cols, basis.pooled_pos)):
        i = off + q
        if j < 0:  # a fixed-prior column: every unit's coefficient moves against its own prior
            pk = 1.0 / d.prior_sd[k] ** 2
            M[:, i, i] += L * pk
            h[:, i] += ((d.prior_mean[k] - theta[:, :, k]) * pk).sum(1)
        elif basis.mean_dir is None:  # the pooled mean mu_j moves with the slopes
            M[:, i, i] += 1.0 / d.mu_sd ** 2
            h[:, i] -= mu[:, j] / d.mu_sd ** 2
        else:  # beta + c d, X d = 1
            w = basis.mean_dir / d.mean_sd ** 2
            M[:, i, i] += (basis.mean_dir * w).sum()
            h[:, i] -= (mu[:, :, j] * w).sum(1)
    return M, h


def apply_shift(theta: np.ndarray, mu: np.ndarray, v: np.ndarray, c: np.ndarray, basis: ShiftBasis, d) -> None:
    """Move ``theta``, ``mu`` and ``v`` by c (chain x D), in place (module docstring)."""
    off = 0
    if basis.intercept:
        theta[..., np.asarray(d.intercepts, np.int64)] += c[:, 0, None, None]
        off = 1
    for q, (k, j) in enumerate(zip(basis.cols, basis.pooled_pos)):
        ci = c[:, off + q]
        theta[:, :, k] += ci[:, None]
        if j >= 0 and basis.mean_dir is None:
            mu[:, j] += ci
        elif j >= 0:
            mu[:, :, j] += ci[:, None] * basis.mean_dir
    v -= c @ basis.X.T


def translate(theta: np.ndarray, mu: np.ndarray, v: np.ndarray, sigma_v: np.ndarray, basis: ShiftBasis, d,
              rng: np.random.Generator) -> None:
    """Step 7b (module docstring): draw c | rest and apply it, in place, to ``theta`` (chain x unit x
    column), ``mu`` (chain x pooled, or chain x R x pooled: beta of a structured mean) and ``v``
    (chain x levels; its scale ``sigma_v``, chain)."""
    C, D = theta.shape[0], basis.X.shape[1]
    if D == 0:
        return
    M, h = shift_moments(theta, mu, v, sigma_v, basis, d)
    chol = np.linalg.cholesky(M)  # M = chol chol'; draw mean + chol'^-1 z
    c = np.linalg.solve(M, h[..., None])[..., 0] + np.linalg.solve(
        np.swapaxes(chol, -1, -2), rng.standard_normal((C, D))[..., None])[..., 0]
    apply_shift(theta, mu, v, c, basis, d)


def nested_shift(group_u: np.ndarray, group_sigma: np.ndarray, group_level: np.ndarray, w: np.ndarray,
                 sigma_w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The per-level move against the nested group effects (module docstring): ``group_u`` (chain x
    group) the nested effects, ``group_sigma`` (chain x group) their units' scales, ``group_level``
    (group) each group's level of the crossed effect ``w`` (chain x levels, scale ``sigma_w``, chain).
    Returns c (chain x levels); the caller adds c[:, group_level] to the nested effects and takes
    c from ``w``."""
    C, J = w.shape
    pg = 1.0 / group_sigma ** 2
    prec = np.stack([np.bincount(group_level, weights=pg[c], minlength=J) for c in range(C)]) + (1.0 / sigma_w ** 2)[:, None]
    lin = w / (sigma_w ** 2)[:, None] - np.stack([np.bincount(group_level, weights=group_u[c] * pg[c], minlength=J)
                                                    for c in range(C)])
    return lin / prec + rng.standard_normal((C, J)) / np.sqrt(prec)
