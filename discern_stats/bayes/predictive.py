"""What a saved fit holds besides its posterior (issue 25.6): observed and constant data, the
pointwise log-likelihood (so ``az.loo`` works) and posterior predictive draws (so
``az.plot_ppc_dist`` works), computed from a `spec.HierarchicalGLM` and its posterior draws the
same way whichever sampler (Gibbs or NUTS) produced them.

The unit of the log-likelihood is the group-effect cluster, not the row: the rows of one
(unit, group) pair, e.g. one (LLM x strategy, item) of the discernment model or one (LLM, world)
of the cue model, share one effect u ~ N(0, sigma[unit]), so leaving one row out would leave its
cluster's other rows in and tell nothing about a new item or world. The log-likelihood of a
cluster c with rows r is the marginal over its effect,

    binomial:  log L_c = log int prod_r Bin(k_r | n_r, logistic(eta_r + sigma x)) phi(x) dx
                       (adaptive Gauss-Hermite: safeguarded Newton steps to the mode m of the
                       integrand's log h(x), 15 nodes m + sqrt(2) t_q / sqrt(-h''(m)); Liu & Pierce
                       1994, Biometrika 81:624. Against a fine grid over 300 random clusters: median
                       error 1e-13, 90 % under 2e-5, worst 4e-3 (all-0 clusters at sigma 4, where the
                       integrand is one-sided); LOO's own Monte Carlo error is far larger)
    normal:    y_c ~ N(eta_c, s^2 I + sigma^2 11'), in closed form:
               log L_c = -n/2 log 2 pi - (n - 1) log s - 1/2 log(s^2 + n sigma^2)
                         - [sum r^2 - sigma^2 (sum r)^2 / (s^2 + n sigma^2)] / (2 s^2),  r = y - eta

and without group effects each row is its own unit. With crossed effects (`spec.CrossedEffect`:
(1 | source), an item effect shared across units) both condition on the crossed effects' draws:
eta includes sigma_t z_t[level] at each draw, and a cluster's likelihood integrates its own u only.
Clusters that share a source are then not independent given the other parameters' uncertainty, so
the cluster unit is approximate there (LOO of a cluster keeps the source effects fitted on it). The binomial coefficient is included, so the
values are log probabilities of the data (comparable across models of the same counts).

Posterior predictive draws replicate every row: binomial k ~ Bin(n, logistic(eta + u)), normal
y ~ N(eta + u, s). u is the posterior draw where the model keeps it (the cue models: the same worlds
again), else a fresh u ~ N(0, sigma[unit]) per cluster (the discernment model keeps only sigma: a
new item in the same group, whichever sampler ran).

Both are computed on at most ``predictive_draws`` draws, thinned evenly within each chain (their
``draw`` coordinate holds the kept draws' indices): the binomial integral costs up to 27 passes
over the rows per draw (12 Newton steps, stopped per cluster at convergence, and 15 nodes), in one
compiled loop over (draw, cluster).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import xarray as xr

GH_NODES = 15  # adaptive Gauss-Hermite nodes per cluster
NEWTON_STEPS = 12  # to the mode of the cluster integrand (h is strictly concave)
MAX_STEP = 3.0  # largest Newton step, in SDs of the effect
NEWTON_TOL = 1e-10  # a Newton step under this (SDs of the effect) ends a cluster's steps, taken without bisection
PREDICTIVE_DRAWS = 1000  # log-likelihood draws kept at most (all chains together)
PPC_DRAWS = 200  # posterior predictive draws kept at most
ROW_EVALS = 2e9  # at most this many row x draw evaluations of the binomial integral (thins further at scale)
PPC_CELLS = 3e7  # at most this many row x draw predictive values saved


def thinned(chains: int, draws: int, total: int) -> np.ndarray:
    """Indices of at most ``total`` draws over all chains, evenly spaced within each chain."""
    per = int(max(1, min(draws, total // max(chains, 1))))
    return np.unique(np.linspace(0, draws - 1, per).round().astype(np.int64))


def theta_draws(spec: Any, post: Any, idx: np.ndarray) -> np.ndarray:
    """(chain, draw, unit, P) coefficients theta in the column order of ``spec.A`` (the blocks
    concatenated, as `HierarchicalGLM.columns`), at draws ``idx``."""
    parts = []
    for b in spec.blocks:
        v = np.asarray(post[b.name].isel(draw=idx).transpose("chain", "draw", spec.unit, *b.dims))
        parts.append(v.reshape(*v.shape[:3], -1))
    return np.concatenate(parts, axis=-1)


def _eta_fixed(spec: Any, theta: np.ndarray) -> np.ndarray:
    """(S, rows) eta without group effects, a_r' theta[unit_r], for theta (S, unit, P)."""
    out = np.empty((theta.shape[0], len(spec.A)))
    for l in range(spec.n_unit):
        rows = np.flatnonzero(spec.unit_index == l)
        if len(rows):
            out[:, rows] = theta[:, l, :] @ spec.A[rows].T
    return out


def clusters(spec: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(cluster index per row, unit index per cluster, labels "unit | group") of the group-effect
    clusters; without group effects every row is its own cluster, labelled by its row number."""
    if spec.group is None:
        n = len(spec.A)
        return np.arange(n), np.asarray(spec.unit_index, np.int64), [str(i) for i in range(n)]
    G = len(spec.coords[spec.group])
    key = np.asarray(spec.unit_index, np.int64) * G + np.asarray(spec.group_index, np.int64)
    uniq, cl = np.unique(key, return_inverse=True)
    units, groups = uniq // G, uniq % G
    labels = [f"{spec.coords[spec.unit][u]} | {spec.coords[spec.group][g]}" for u, g in zip(units, groups)]
    return cl.astype(np.int64), units.astype(np.int64), labels


def _summer(cl: np.ndarray, n_cl: int):
    """x (S, rows) -> (S, clusters) sums over each cluster's rows."""
    from scipy import sparse
    M = sparse.csr_matrix((np.ones(len(cl)), (cl, np.arange(len(cl)))), shape=(n_cl, len(cl)))
    return lambda x: np.asarray((M @ x.T).T)


def _log_binom_coef(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def binomial_cluster_loglik_numpy(eta: np.ndarray, k: np.ndarray, n: np.ndarray, sig: np.ndarray, cl: np.ndarray,
                                  n_cl: int, nodes: int = GH_NODES, newton: int = NEWTON_STEPS) -> np.ndarray:
    """(S, clusters) log int prod_r Bin(k_r | n_r, logistic(eta_r + sig_c x)) phi(x) dx by adaptive
    Gauss-Hermite; eta (S, rows), sig (S, clusters), cl the cluster of each row. The plain numpy
    version (``newton`` steps for every cluster, 27 array passes over the rows per draw): the
    reference that `binomial_cluster_loglik` is tested against."""
    from scipy.special import expit
    total = _summer(cl, n_cl)
    const = total(_log_binom_coef(k, n)[None, :])
    S = eta.shape[0]
    x = np.zeros((S, n_cl))
    sr = sig[:, cl]
    lo, hi = np.full_like(x, -np.inf), np.full_like(x, np.inf)  # the mode's bracket (h' decreases)
    for _ in range(newton):
        p = expit(eta + sr * x[:, cl])
        grad = sig * total(k - n * p) - x
        hess = -(sig ** 2) * total(n * p * (1 - p)) - 1.0
        lo, hi = np.where(grad > 0, np.maximum(lo, x), lo), np.where(grad <= 0, np.minimum(hi, x), hi)
        # a Newton step, damped, and a bisection where it would leave the bracket (Newton alone can
        # cycle between two points when the curvature changes fast: sigma 4 over 100 rows); a step
        # under NEWTON_TOL is taken as it is (at the mode x is an end of its own bracket, and
        # bisecting there would move it away again)
        step = np.clip(grad / hess, -MAX_STEP, MAX_STEP)
        new = x - step
        inside = ((new > lo) & (new < hi)) | (np.abs(step) < NEWTON_TOL)
        x = np.where(inside | ~np.isfinite(lo + hi), new, 0.5 * (lo + hi))
    p = expit(eta + sr * x[:, cl])
    scale = 1.0 / np.sqrt((sig ** 2) * total(n * p * (1 - p)) + 1.0)
    t, w = np.polynomial.hermite.hermgauss(nodes)
    terms = np.empty((nodes, S, n_cl))
    for q in range(nodes):
        xq = x + np.sqrt(2.0) * t[q] * scale
        e = eta + sr * xq[:, cl]
        terms[q] = total(k * e - n * np.logaddexp(0.0, e)) - 0.5 * xq ** 2 + t[q] ** 2 + np.log(w[q])
    m = terms.max(axis=0)
    lse = m + np.log(np.exp(terms - m).sum(axis=0))
    return const + lse + np.log(np.sqrt(2.0) * scale) - 0.5 * np.log(2 * np.pi)


@numba.njit(cache=True, nogil=True, parallel=True)
def _cluster_loglik_kernel(eta, k, n, sig, starts, t, logw, newton, tol, out):  # pragma: no cover - compiled
    """out[s, c] = log int prod_r Bin(k_r | n_r, logistic(eta[s, r] + sig[s, c] x)) phi(x) dx without
    the binomial coefficients, for rows sorted by cluster (cluster c: rows starts[c]:starts[c + 1]).
    The same safeguarded Newton steps as `binomial_cluster_loglik_numpy`, stopped per cluster once a
    Newton step is under ``tol``; then the adaptive Gauss-Hermite sum, one pass per node, with
    log(1 + e^e) = max(e, 0) + log(1 + e^-|e|) and the (1 + e^-|e|) of the n = 1 rows multiplied
    before one log (logged early past 1e280)."""
    S, n_cl, Q = eta.shape[0], starts.shape[0] - 1, t.shape[0]
    sqrt2 = np.sqrt(2.0)
    for s in numba.prange(S):  # draws in parallel
        terms = np.empty(Q)
        for c in range(n_cl):
            a, b = starts[c], starts[c + 1]
            sg = sig[s, c]
            x, lo, hi = 0.0, -np.inf, np.inf
            for _ in range(newton):
                g, h = 0.0, 0.0
                for r in range(a, b):
                    p = 1.0 / (1.0 + np.exp(-(eta[s, r] + sg * x)))
                    g += k[r] - n[r] * p
                    h += n[r] * p * (1.0 - p)
                grad = sg * g - x
                hess = -(sg * sg) * h - 1.0
                if grad > 0:
                    lo = max(lo, x)
                else:
                    hi = min(hi, x)
                step = min(max(grad / hess, -MAX_STEP), MAX_STEP)
                if abs(step) < tol:  # converged: at the mode x is an end of its own bracket
                    x -= step
                    break
                new = x - step
                x = new if (new > lo and new < hi) or not np.isfinite(lo + hi) else 0.5 * (lo + hi)
            h = 0.0
            for r in range(a, b):
                p = 1.0 / (1.0 + np.exp(-(eta[s, r] + sg * x)))
                h += n[r] * p * (1.0 - p)
            scale = 1.0 / np.sqrt(sg * sg * h + 1.0)
            for q in range(Q):
                xq = x + sqrt2 * t[q] * scale
                lin, prod = 0.0, 1.0
                for r in range(a, b):
                    e = eta[s, r] + sg * xq
                    lin += k[r] * e - n[r] * max(e, 0.0)
                    base = 1.0 + np.exp(-abs(e))
                    if n[r] == 1.0:
                        prod *= base
                        if prod > 1e280:
                            lin -= np.log(prod)
                            prod = 1.0
                    else:
                        lin -= n[r] * np.log(base)
                terms[q] = lin - np.log(prod) - 0.5 * xq * xq + t[q] * t[q] + logw[q]
            m = terms.max()
            acc = 0.0
            for q in range(Q):
                acc += np.exp(terms[q] - m)
            out[s, c] = m + np.log(acc) + np.log(sqrt2 * scale) - 0.5 * np.log(2 * np.pi)


def binomial_cluster_loglik(eta: np.ndarray, k: np.ndarray, n: np.ndarray, sig: np.ndarray, cl: np.ndarray,
                            n_cl: int, nodes: int = GH_NODES, newton: int = NEWTON_STEPS) -> np.ndarray:
    """(S, clusters) log int prod_r Bin(k_r | n_r, logistic(eta_r + sig_c x)) phi(x) dx by adaptive
    Gauss-Hermite (module docstring); eta (S, rows), sig (S, clusters), cl the cluster of each row.
    A compiled loop over (draw, cluster) (`_cluster_loglik_kernel`): the Newton steps stop per
    cluster at convergence instead of running ``newton`` times everywhere, and nothing of size
    (S, rows) is allocated per pass. Equal to `binomial_cluster_loglik_numpy` within 1e-9 (tested);
    ``benchmarks/bench_predictive.py`` has the ratio."""
    order = np.argsort(cl, kind="stable")
    starts = np.zeros(n_cl + 1, np.int64)
    np.cumsum(np.bincount(cl, minlength=n_cl), out=starts[1:])
    const = np.bincount(cl, weights=_log_binom_coef(k, n), minlength=n_cl)
    t, w = np.polynomial.hermite.hermgauss(nodes)
    out = np.empty((eta.shape[0], n_cl))
    _cluster_loglik_kernel(np.ascontiguousarray(eta[:, order]), np.ascontiguousarray(k[order], dtype=float),
                           np.ascontiguousarray(n[order], dtype=float), np.ascontiguousarray(sig, dtype=float),
                           starts, t, np.log(w), newton, NEWTON_TOL, out)
    return out + const[None, :]


def normal_cluster_loglik(eta: np.ndarray, y: np.ndarray, s: np.ndarray, sig: np.ndarray | None, cl: np.ndarray,
                          n_cl: int) -> np.ndarray:
    """(S, clusters) marginal log density of each cluster's outcomes, y_c ~ N(eta_c, s^2 I + sig^2 11')
    (closed form, module docstring); s and sig (S, clusters); ``sig=None``: no group effect."""
    total = _summer(cl, n_cl)
    r = y[None, :] - eta
    n = total(np.ones((1, len(y))))
    s2 = s ** 2
    sr, sr2 = total(r), total(r * r)
    if sig is None:
        return -0.5 * n * np.log(2 * np.pi * s2) - sr2 / (2 * s2)
    v = s2 + n * sig ** 2
    return (-0.5 * n * np.log(2 * np.pi) - 0.5 * (n - 1) * np.log(s2) - 0.5 * np.log(v)
            - (sr2 - sig ** 2 * sr ** 2 / v) / (2 * s2))


def _chunks(S: int, rows: int, budget: float = 2e7):
    step = int(max(1, min(S, budget // max(rows, 1))))
    for a in range(0, S, step):
        yield slice(a, min(S, a + step))


def _unit_draws(post: Any, name: str, unit: str, idx: np.ndarray) -> np.ndarray:
    return np.asarray(post[name].isel(draw=idx).transpose("chain", "draw", unit))


def log_likelihood(spec: Any, post: Any, idx: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(chain, len(idx), clusters) pointwise log-likelihood of ``spec``'s data at the draws ``idx``,
    one value per group-effect cluster (module docstring), and the clusters' labels."""
    nm = spec.names
    cl, cl_unit, labels = clusters(spec)
    n_cl = len(labels)
    th = theta_draws(spec, post, idx)
    C, D = th.shape[:2]
    th = th.reshape(C * D, *th.shape[2:])
    sig = _unit_draws(post, nm["sigma"], spec.unit, idx).reshape(C * D, -1)[:, cl_unit] if spec.group else None
    res = (_unit_draws(post, nm["resid"], spec.unit, idx).reshape(C * D, -1)[:, cl_unit]
           if spec.family == "normal" else None)
    off = spec.crossed_offset(post, idx) if getattr(spec, "crossed", None) else None
    off = None if off is None else off.reshape(C * D, -1)
    out = np.empty((C * D, n_cl))
    for sl in _chunks(C * D, 4 * len(spec.A)):  # eta and a few arrays of its size per chunk
        eta = _eta_fixed(spec, th[sl]) + (0.0 if off is None else off[sl])
        if spec.family == "binomial":
            k, n = np.asarray(spec.y, float), np.asarray(spec.n, float)
            if sig is None:
                out[sl] = k * eta - n * np.logaddexp(0.0, eta) + _log_binom_coef(k, n)
            else:
                out[sl] = binomial_cluster_loglik(eta, k, n, sig[sl], cl, n_cl)
        else:
            out[sl] = normal_cluster_loglik(eta, np.asarray(spec.y, float), res[sl], None if sig is None else sig[sl],
                                            cl, n_cl)
    return out.reshape(C, D, n_cl), labels


def posterior_predictive(spec: Any, post: Any, idx: np.ndarray, rng: np.random.Generator,
                         conditional: bool = True) -> np.ndarray:
    """(chain, len(idx), rows) replicated outcomes of every row at the draws ``idx`` (module
    docstring); ``conditional=False`` draws fresh group effects even where the posterior holds them."""
    from scipy.special import expit
    nm = spec.names
    th = theta_draws(spec, post, idx)
    C, D = th.shape[:2]
    th = th.reshape(C * D, *th.shape[2:])
    ui = np.asarray(spec.unit_index, np.int64)
    eta = _eta_fixed(spec, th)
    if getattr(spec, "crossed", None):  # the crossed effects' draws: the same sources / shared items again
        eta = eta + spec.crossed_offset(post, idx).reshape(C * D, -1)
    if spec.group is not None:
        sigma = _unit_draws(post, nm["sigma"], spec.unit, idx).reshape(C * D, -1)
        gi = np.asarray(spec.group_index, np.int64)
        if conditional and nm["z"] in post.data_vars:
            z = np.asarray(post[nm["z"]].isel(draw=idx).transpose("chain", "draw", spec.unit, spec.group))
            z = z.reshape(C * D, *z.shape[2:])[:, ui, gi]
        else:
            cl, _, labels = clusters(spec)
            z = rng.standard_normal((C * D, len(labels)))[:, cl]
        eta = eta + sigma[:, ui] * z
    if spec.family == "binomial":
        n = np.asarray(spec.n, np.int64)
        dtype = np.int8 if n.max() < 127 else np.int32
        y = rng.binomial(n[None, :], expit(eta)).astype(dtype)
    else:
        s = _unit_draws(post, nm["resid"], spec.unit, idx).reshape(C * D, -1)[:, ui]
        y = (eta + s * rng.standard_normal(eta.shape)).astype(np.float32)
    return y.reshape(C, D, -1)


def draw_budget(rows: int, chains: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """The draws kept for the log-likelihood and for the posterior predictive, given the rows."""
    ll_total = int(min(PREDICTIVE_DRAWS, max(100, ROW_EVALS // max(rows * (GH_NODES + NEWTON_STEPS), 1))))
    pp_total = int(min(PPC_DRAWS, max(20, PPC_CELLS // max(rows, 1))))
    return thinned(chains, draws, ll_total), thinned(chains, draws, pp_total)


def groups_for(specs: dict[str, Any], post: Any, *, seed: int = 0, joint: str | None = None,
               conditional: bool = True) -> dict[str, xr.Dataset]:
    """The observed_data, constant_data, log_likelihood and posterior_predictive groups of a fit
    with the part specs ``specs`` (name -> spec) and posterior ``post`` (an xarray Dataset).

    Each part's outcome is named ``spec.names["y"]`` in observed_data and posterior_predictive
    (dims ``spec.names["row"]``). With one part its log-likelihood carries the same name (dim
    ``spec.names["cluster"]``); with several, ``joint`` names one variable: the sum over parts of
    the cluster log-likelihoods with the same label, on the union of the clusters (the parts have
    independent parameters and effects, so a cluster's joint likelihood is the product)."""
    rng = np.random.default_rng(seed)
    C, D = post.sizes["chain"], post.sizes["draw"]
    draw_coord = np.asarray(post["draw"])
    obs, const, ll, pp = {}, {}, {}, {}
    rows = max(len(s.A) for s in specs.values())
    ll_idx, pp_idx = draw_budget(rows, C, D)
    joint_parts: list[tuple[np.ndarray, list[str]]] = []
    for part, spec in specs.items():
        nm = spec.names
        row = nm["row"]
        obs[nm["y"]] = xr.DataArray(np.asarray(spec.y), dims=[row])
        if spec.family == "binomial":
            const[nm["n"]] = xr.DataArray(np.asarray(spec.n), dims=[row])
        # integer codes into the posterior's coordinates (a string per row costs 100 bytes at 670,000 rows)
        const[nm["unit_of_row"]] = xr.DataArray(np.asarray(spec.unit_index, np.int32), dims=[row],
                                                attrs={"codes_of": spec.unit})
        if spec.group is not None:
            const[nm["group_of_row"]] = xr.DataArray(np.asarray(spec.group_index, np.int32), dims=[row],
                                                     attrs={"codes_of": spec.group})
        const[nm["design"]] = xr.DataArray(spec.A, dims=[row, nm["column"]], coords={nm["column"]: spec.column_labels()})
        pp[nm["y"]] = xr.DataArray(posterior_predictive(spec, post, pp_idx, rng, conditional), dims=["chain", "draw", row],
                                   coords={"chain": np.asarray(post["chain"]), "draw": draw_coord[pp_idx]})
        vals, labels = log_likelihood(spec, post, ll_idx)
        if len(specs) == 1 or joint is None:
            ll[nm["y"]] = xr.DataArray(vals, dims=["chain", "draw", nm["cluster"]],
                                       coords={"chain": np.asarray(post["chain"]), "draw": draw_coord[ll_idx],
                                               nm["cluster"]: labels})
        else:
            joint_parts.append((vals, labels))
    if joint_parts:
        labels = sorted(set().union(*(lab for _, lab in joint_parts)))
        where = {lab: j for j, lab in enumerate(labels)}
        total = np.zeros((*joint_parts[0][0].shape[:2], len(labels)))
        for vals, lab in joint_parts:
            total[:, :, [where[x] for x in lab]] += vals  # labels are unique within a part
        ll[joint] = xr.DataArray(total, dims=["chain", "draw", "cluster"],
                                 coords={"chain": np.asarray(post["chain"]), "draw": draw_coord[ll_idx],
                                         "cluster": labels})
    note = {"log_likelihood_unit": "group-effect cluster (unit | group), the effect integrated out",
            "draws_kept": "thinned evenly within each chain; draw holds the posterior draw index"}
    return {"observed_data": xr.Dataset(obs), "constant_data": xr.Dataset(const),
            "log_likelihood": xr.Dataset(ll, attrs=note), "posterior_predictive": xr.Dataset(pp, attrs=note)}
