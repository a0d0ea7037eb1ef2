"""Simulation-based calibration (Talts et al. 2018) of the Gibbs samplers (issue 16), both families
of `discern_stats.bayes.spec.HierarchicalGLM`: draw parameters from the prior, data from them, and
the rank of each true value among 99 thinned posterior draws; under a correct sampler the ranks
are uniform on 0..99. The test suite runs 60 replications per family
(tests/test_discernment_model.py); this script runs more.

    python benchmarks/sbc_gibbs.py --reps 300
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from discern_stats.bayes.spec import Block, HierarchicalGLM


def rank_uniformity(ranks: np.ndarray) -> tuple[float, np.ndarray]:
    """Chi-square test of uniform ranks (10 bins) per parameter; (smallest Holm-adjusted p, raw p)."""
    p = np.array([stats.chisquare(np.bincount(ranks[:, j] // 10, minlength=10)).pvalue for j in range(ranks.shape[1])])
    return float(np.minimum(1, np.maximum.accumulate(np.sort(p) * (len(p) - np.arange(len(p))))).min()), p


def pooled_rank_uniformity(ranks: np.ndarray) -> float:
    """Chi-square p of one histogram (10 bins) of the ranks of every parameter together: the power to
    catch a bias shared by all parameters (the negative control), where a per-parameter test over 60
    replications has little."""
    return float(stats.chisquare(np.bincount(ranks.ravel() // 10, minlength=10)).pvalue)


def prior_draw(spec: HierarchicalGLM, rng):
    """A parameter draw from the spec's priors, and data simulated from it in place of spec.y."""
    L, P = spec.n_unit, spec.A.shape[1]
    K = sum(1 for b in spec.blocks if b.sd is None for _ in range(spec._width(b)))
    mu = rng.normal(0, spec.mu_sd, K)
    tau = rng.gamma(spec.tau_shape, 1 / spec.tau_rate, K)
    theta = np.zeros((L, P))
    _, sd, pooled, _ = spec._prior()
    theta[:] = rng.normal(0, sd, (L, P))
    theta[:, pooled] = mu + tau * rng.standard_normal((L, K))
    sigma = np.abs(rng.normal(0, spec.sigma_sd, L))
    W = len(spec.coords[spec.group])
    u = sigma[:, None] * rng.standard_normal((L, W))
    eta = (spec.A * theta[spec.unit_index]).sum(1) + u[spec.unit_index, spec.group_index]
    if spec.family == "binomial":
        y = rng.binomial(spec.n, 1 / (1 + np.exp(-eta)))
        s = None
    else:
        s = np.abs(rng.normal(0, spec.resid_sd, L))
        y = eta + s[spec.unit_index] * rng.standard_normal(len(eta))
    truth = np.r_[theta.ravel(), mu, tau, sigma, [] if s is None else s]
    return y, truth


def sbc_ranks(family: str, reps: int, seed: int, n_slopes: int = 1, n_intercepts: int = 1, tau_shape: float = 5.0,
              tau_rate: float = 5.0, **sampler_kwargs) -> np.ndarray:
    """Simulation-based calibration (Talts et al. 2018): draw parameters from the prior, data from
    them, and the rank of each true value among 99 thinned posterior draws; under a correct sampler
    the ranks are uniform on 0..99. The model: 2 units x 5 groups x 6 cells, ``n_intercepts``
    one-hot intercepts (alternating over the cells) and ``n_slopes`` pooled slopes with
    tau ~ Gamma(tau_shape, tau_rate) (Gamma(2, 20): tau mostly below 0.2, where the units barely
    differ); ``sampler_kwargs`` go to the Gibbs sampler."""
    rng = np.random.default_rng(seed)
    L, W, per = 2, 5, 6
    unit = np.repeat(np.arange(L), W * per)
    group = np.tile(np.repeat(np.arange(W), per), L)
    x = rng.normal(size=(len(unit), n_slopes))
    onehot = np.eye(n_intercepts)[np.arange(len(unit)) % n_intercepts]
    a_dims = ("ai",) if n_intercepts > 1 else ()
    spec = HierarchicalGLM(family=family, unit="u", coords={"u": [0, 1], "k": [f"x{j}" for j in range(n_slopes)],
                                                            "ai": list(range(n_intercepts)), "w": list(range(W))},
                           blocks=[Block("a", a_dims, sd=1.5, intercept=True), Block("b", ("k",))],
                           A=np.column_stack([onehot, x]), unit_index=unit, y=np.zeros(len(x), int),
                           n=np.full(len(x), 3) if family == "binomial" else None, group="w", group_index=group,
                           mu_sd=1.0, tau_shape=tau_shape, tau_rate=tau_rate, sigma_sd=0.7, resid_sd=1.0)
    ranks, shifted = [], []
    for r in range(reps):
        y, truth = prior_draw(spec, rng)
        spec.y = y
        post, _, _ = spec.sample(draws=495, tune=100, chains=1, random_seed=int(rng.integers(1 << 31)),
                                 keep_group_effects=False, **sampler_kwargs)
        names = ["a", "b", "mu", "tau", "sigma_u"] + (["resid_sd"] if family == "normal" else [])
        d = np.concatenate([post[v].reshape(495, -1) for v in names], axis=1)[::5]  # 99 thinned draws
        t = order_truth(truth, L, n_intercepts + n_slopes, n_intercepts)
        ranks.append((d < t).sum(0))
        # the ranks a sampler biased by half a posterior SD would give (a negative control)
        shifted.append((d < t + 0.5 * d.std(axis=0)).sum(0))
    return np.asarray(ranks), np.asarray(shifted)


def order_truth(truth, L, P, n_intercepts=1):
    """truth laid out as theta (L x [a..., b...], P columns), mu, tau, sigma (L), s (L) -> a (L x
    intercepts), b (L x slopes), mu, tau, sigma, s: the order of the posterior draws."""
    theta = truth[:L * P].reshape(L, P)
    return np.r_[theta[:, :n_intercepts].ravel(), theta[:, n_intercepts:].ravel(), truth[L * P:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for family in ("binomial", "normal"):
        t = time.perf_counter()
        ranks, shifted = sbc_ranks(family, a.reps, a.seed)
        holm, p = rank_uniformity(ranks)
        print(f"{family}: {a.reps} replications, {ranks.shape[1]} parameters; per-parameter chi-square p "
              f"min {p.min():.3f} median {np.median(p):.3f}; smallest Holm-adjusted p {holm:.3f} (pass > 0.01); "
              f"half-SD-biased control: {rank_uniformity(shifted)[0]:.2g}; {time.perf_counter() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
