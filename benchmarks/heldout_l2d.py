"""Held-out Design A (Learn2Discern, seed 000) trials with known truth, for measuring the discernment
model on data it was not tuned on (issue 25).

Written from the paper (seed 000, sections 1-3) and the interchange format
(`discern_stats.store.tables.L2D_COLUMNS`, checked by `validate_trials`) alone: nothing here reads
or imports `discern_stats.simulate` or `benchmarks/bench_discernment.py`.

Layout (paper scale, the defaults): 13 LLMs x 5 prompt strategies x 344 items x 6 sources x 5
factors = 670,800 trials. The 132 sources fall evenly into 3 popularity tiers x 2 reliability tiers
(22 each; reliability PC1 in [0, 1], popularity an Open PageRank 0-10); each item is paired with one
source of each of the 6 strata and asked with the 5 factors F in {1/3, 1/2, 1, 2, 3} (claim C = T x F),
the same (item, source, factor) tuples for every LLM and strategy. Every size is an argument.

Generative process (a row r = LLM l, strategy s, item i, source j, factor F; group g = (l, s)):

* truth T_i = 10^U(0.5, 6) to 3 significant digits; claim C = T F to 6 significant digits.
* one prior per (LLM, item), the same in every strategy (the prior question precedes the strategy):
  exactly T with probability logistic(know_l + ease_i), else T exp(N(0, 0.6)) to 3 significant
  digits. Invalid priors (rate U(0, 0.04) per LLM) make all rows of that (LLM, item) invalid;
  invalid posteriors (rate U(0.01, 0.06) per (LLM, strategy)) are missing at random.
* predictors on the model's coding (`discern_stats.bayes.discernment` docstring): reliability and
  popularity as z-scores over the distinct sources of the analysed rows (valid, claim != prior),
  ddof 0; improvement I~ = (|P1 - T| - |C - T|) / (|P1 - T| + |C - T|) as a z-score over those rows.
  correct_i = [P1 = T].
* each part (move, away, full, fraction) has the linear predictor

      eta = a[g] + b[g] . (z_rel, z_pop, z_imp) + c_s correct (move only)
            + u[i] + v[l, i] + w[l, s, i] + e[j]

  u: item effect shared by all LLMs and strategies; v: LLM x item (shared across strategies, as the
  prior is); w: LLM x strategy x item; e[j]: source effect, SD ``source_sd`` (0, 0.5, 1.5), for
  each part independently, optionally correlated with reliability: e_j = source_sd (rho z_rel,j +
  sqrt(1 - rho^2) n_j), n_j ~ N(0, 1).
  Slopes b[g] = mu + llm effect (SD tau_llm) + strategy effect (fixed, from the paper's section 3:
  Reliability raises the reliability slopes, Bayesian raises both source slopes and overshoots,
  Defense keeps correct priors: c_Defense = -1.5) + LLM x strategy effect (SD tau_cell); groups
  that barely differ: every away slope (no strategy effect, tau 0 or 0.02) and the fraction
  popularity slope (no spread at all).
* response: moved ~ Bernoulli(logistic(eta_move)); away | moved ~ Bernoulli(logistic(eta_away)),
  then an overshoot (f > 1: P2 = C (C / P1)^g) with probability 0.7 (Bayesian 0.85) else away from
  the claim (f < 0: P2 = P1 (P1 / C)^g), g ~ 0.05 + Gamma(2, 0.2); full | moved, not away ~
  Bernoulli(logistic(eta_full)) (P2 = C: the heap at f = 1); otherwise partial: with probability
  ``heap_half`` (0.15) f = 0.5 exactly (splitting the difference: the heap at 0.5), else f ~
  Beta(alpha, phi - alpha), phi = 10, with alpha solving digamma(alpha) - digamma(phi - alpha) =
  eta_fraction, so that E[logit f] = eta_fraction exactly (f clipped to [1e-4, 1 - 1e-4]: a shift
  of E[logit f] below 0.01 even at eta = -3, where the clip binds most). P2 = P1 + f (C - P1).
  About 7 % of moved rows overshoot.

Truth, in the model's coding (`truth` returned beside the table):

* ``slopes``: per (part, LLM, strategy, predictor) the slope on the z-score the model uses (per SD
  over distinct sources / rows). For move, away and full it is b[g] (+ rho source_sd for reliability
  when the source effects are correlated with reliability: with e_j correlated, only the total
  source-level slope b + rho source_sd is identified from the sources, and it is the effect of a
  source's reliability on its log-odds). It is the conditional slope given the item and source
  effects (and, for move, given the correct-prior term), the estimand of a model with
  (1 | item) + (1 | LLM:strategy:item) + (1 | source); a model without them estimates an
  attenuated (population-averaged) slope. For fraction it is (1 - heap_half) b[g]: E[logit f |
  partial] = (1 - heap_half) eta_fraction + heap_half * logit(0.5), a closed form.
* ``population``: per (part, predictor) the mean slope over the population of groups,
  mu + mean over strategies of the strategy effect (LLM and LLM x strategy effects have mean 0),
  times (1 - heap_half) for fraction, plus rho source_sd for reliability; and ``mean_over_groups``,
  the average of the realised group slopes.
* ``sd_raw``: the SDs the z-scores divide by (a slope per raw unit is slope / sd), so a model that
  standardises otherwise can convert: slope_model = slope / sd_raw * sd_model.
* ``rates``: per (LLM, strategy) the generator's expected shares over its valid analysed rows, given
  the realised effects (means of the row probabilities): moved, away, overshoot, away-from-claim,
  full, partial, the correct-defense rate 1 - P(move | P1 = T, C != T) (the paper's CD), and the
  average marginal effects of reliability and popularity on P(move) in percentage points per SD,
  100 mean_r p_r (1 - p_r) slope (and their difference), the paper-scale form of the move slopes.

    python benchmarks/heldout_l2d.py --llms 2 --strategies 2 --items 30   # prints a summary
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import digamma, expit

STRATEGIES = ("zero-shot", "CoT", "Reliability", "Bayesian", "Defense")  # seed 000 section 3
FACTORS = (1 / 3, 1 / 2, 1.0, 2.0, 3.0)  # seed 000 section 2
PARTS = ("move", "away", "full", "fraction")
PREDICTORS = ("reliability", "popularity", "improvement")
PHI = 10.0  # Beta concentration of partial moves
F_CLIP = 1e-4

# mean slopes mu[part] on (reliability, popularity, improvement), logit per SD; the paper finds
# popularity about twice reliability (rho 0.07 vs 0.03)
MU = {"move": (0.10, 0.20, 0.15), "away": (-0.05, 0.0, -0.20), "full": (0.10, 0.15, 0.20),
      "fraction": (0.05, 0.10, 0.15)}
# strategy effects on the slopes (fixed), per part: {strategy: (d_rel, d_pop, d_imp)}
STRATEGY_SLOPE = {"Reliability": {"move": (0.20, 0.0, 0.0), "full": (0.15, 0.0, 0.0), "fraction": (0.10, 0.0, 0.0)},
                  "Bayesian": {"move": (0.10, 0.10, -0.10), "full": (0.05, 0.05, 0.0), "fraction": (0.10, 0.0, 0.0)},
                  "CoT": {"move": (0.0, 0.0, 0.05)},
                  "Defense": {"move": (0.0, 0.0, 0.10)}}
# between-LLM and LLM x strategy SDs of the slopes; zeros / 0.02: groups that barely differ
TAU_LLM = {"move": (0.10, 0.10, 0.15), "away": (0.02, 0.0, 0.02), "full": (0.10, 0.05, 0.10),
           "fraction": (0.0, 0.0, 0.10)}
TAU_CELL = {"move": (0.05, 0.05, 0.05), "away": (0.0, 0.0, 0.02), "full": (0.05, 0.02, 0.05),
            "fraction": (0.0, 0.0, 0.05)}
INTERCEPT = {"move": 0.5, "away": -2.5, "full": -0.4, "fraction": 0.0}
STRATEGY_INTERCEPT = {"Bayesian": {"move": 0.4, "away": 0.7, "full": 0.3}, "Defense": {"move": -0.3},
                      "CoT": {"move": -0.1}}
CORRECT_PRIOR = {"Defense": -1.5}  # c_s; other strategies -0.3
CORRECT_PRIOR_OTHER = -0.3
OVERSHOOT_SHARE = {"Bayesian": 0.85}  # others 0.7
OVERSHOOT_OTHER = 0.7
ITEM_SD = {"move": 0.7, "away": 0.3, "full": 0.5, "fraction": 0.4}  # u[i]
LLM_ITEM_SD = 0.3   # v[l, i], the same for every part
CELL_ITEM_SD = 0.2  # w[l, s, i]


@dataclass
class Layout:
    """The sizes and nuisance settings of one held-out data set (defaults: the paper's scale)."""
    llms: int = 13
    strategies: int = 5
    items: int = 344
    sources: int = 132  # a multiple of 6 (3 popularity x 2 reliability tiers)
    source_sd: float = 0.5
    source_rel_corr: float = 0.0
    heap_half: float = 0.15
    invalid: bool = True


def _sig(x: np.ndarray, digits: int) -> np.ndarray:
    """Round to ``digits`` significant digits."""
    x = np.asarray(x, float)
    mag = np.floor(np.log10(np.abs(np.where(x == 0, 1.0, x))))
    scale = 10.0 ** (digits - 1 - mag)
    return np.round(x * scale) / scale


def beta_alpha_for_logit_mean(eta: np.ndarray, phi: float = PHI, iters: int = 80) -> np.ndarray:
    """alpha in (0, phi) with E[logit f] = digamma(alpha) - digamma(phi - alpha) = eta for
    f ~ Beta(alpha, phi - alpha) (bisection; the left side increases in alpha)."""
    eta = np.asarray(eta, float)
    lo, hi = np.full(eta.shape, 1e-9), np.full(eta.shape, phi - 1e-9)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        up = digamma(mid) - digamma(phi - mid) < eta
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    return 0.5 * (lo + hi)


def draw_partial_fraction(eta: np.ndarray, heap_half: float, rng: np.random.Generator) -> np.ndarray:
    """Fractions f of partial moves: 0.5 with probability ``heap_half``, else Beta(alpha, PHI - alpha)
    with E[logit f] = eta (clipped to [F_CLIP, 1 - F_CLIP]); so E[logit f] = (1 - heap_half) eta."""
    eta = np.asarray(eta, float)
    heap = rng.random(eta.shape) < heap_half
    alpha = beta_alpha_for_logit_mean(eta)
    f = np.clip(rng.beta(alpha, PHI - alpha), F_CLIP, 1 - F_CLIP)
    return np.where(heap, 0.5, f)


def classify(prior, posterior, claim) -> np.ndarray:
    """none / partial / full / away from the stored numbers, as the model defines them
    (f = (P2 - P1) / (C - P1); equality exact up to 1e-9 relative)."""
    p1, p2, c = (np.asarray(v, float) for v in (prior, posterior, claim))
    f = (p2 - p1) / (c - p1)
    same = lambda a, b: np.isclose(a, b, rtol=1e-9, atol=0.0)  # noqa: E731
    return np.select([same(p2, p1), same(p2, c), (f > 0) & (f < 1)], ["none", "full", "partial"], "away")


def _sources(rng: np.random.Generator, n: int) -> pd.DataFrame:
    if n % 6:
        raise ValueError(f"sources must be a multiple of 6 (3 popularity x 2 reliability tiers), not {n}")
    per = n // 6
    rel_tiers = [(0.10, 0.50), (0.60, 0.95)]
    pop_tiers = [(2.0, 4.0), (4.0, 6.0), (6.0, 8.5)]
    rows = []
    for pt, (plo, phi_) in enumerate(pop_tiers):
        for rt, (rlo, rhi) in enumerate(rel_tiers):
            for k in range(per):
                rows.append({"source": f"news{pt}{rt}-{k:02d}.example", "stratum": pt * 2 + rt,
                             "reliability": round(float(rng.uniform(rlo, rhi)), 3),
                             "popularity": round(float(rng.uniform(plo, phi_)), 2)})
    return pd.DataFrame(rows)


def _effect(rng, sd, shape):
    return sd * rng.standard_normal(shape) if sd > 0 else np.zeros(shape)


def generate(layout: Layout | None = None, seed: int = 0, **sizes) -> tuple[pd.DataFrame, dict]:
    """(interchange DataFrame with `L2D_COLUMNS`, truth dict; see the module docstring)."""
    if layout is not None and sizes:
        raise TypeError("pass a Layout or keyword sizes, not both")
    L = layout or Layout(**sizes)
    if not 1 <= L.strategies <= len(STRATEGIES):
        raise ValueError(f"strategies must be 1..{len(STRATEGIES)}")
    rng = np.random.default_rng(seed)
    llms = [f"heldout-llm{i:02d}" for i in range(L.llms)]
    strategies = list(STRATEGIES[:L.strategies])
    src = _sources(rng, L.sources)
    n_l, n_s, n_i = L.llms, L.strategies, L.items
    # tuples: each item with one source of each stratum, x 5 factors (the same for every LLM / strategy)
    strata = [np.flatnonzero(src.stratum.to_numpy() == k) for k in range(6)]
    item_src = np.column_stack([rng.choice(strata[k], n_i) for k in range(6)])  # n_i x 6
    T = _sig(10 ** rng.uniform(0.5, 6, n_i), 3)
    # one prior per (LLM, item)
    know = rng.normal(-0.5, 0.5, n_l)
    ease = rng.normal(0, 1, n_i)
    exact = rng.random((n_l, n_i)) < expit(know[:, None] + ease[None, :])
    prior_li = np.where(exact, T[None, :], _sig(T[None, :] * np.exp(rng.normal(0, 0.6, (n_l, n_i))), 3))
    prior_ok_li = rng.random((n_l, n_i)) >= (rng.uniform(0, 0.04, n_l)[:, None] if L.invalid else 0.0)
    post_bad_ls = rng.uniform(0.01, 0.06, (n_l, n_s)) if L.invalid else np.zeros((n_l, n_s))

    # rows in order llm, strategy, item, source slot, factor
    shape = (n_l, n_s, n_i, 6, len(FACTORS))
    idx = np.indices(shape).reshape(5, -1)
    li, si, ii, slot, fi = idx
    n = li.size
    j = item_src[ii, slot]
    F = np.asarray(FACTORS)[fi]
    truth_v = T[ii]
    claim = _sig(truth_v * F, 6)
    prior = prior_li[li, ii]
    prior_ok = prior_ok_li[li, ii]
    post_ok = rng.random(n) >= post_bad_ls[li, si]
    valid = prior_ok & post_ok
    analysed = valid & (claim != prior)
    correct = (prior == truth_v).astype(float)
    e1, e2 = np.abs(prior - truth_v), np.abs(claim - truth_v)
    imp = np.where(e1 + e2 > 0, (e1 - e2) / np.where(e1 + e2 > 0, e1 + e2, 1.0), 0.0)
    # z-scores on the model's coding: sources once each over the analysed rows, improvement over rows
    seen = np.unique(j[analysed])
    sd_raw, mean_raw = {}, {}
    z = np.empty((n, 3))
    for k, col in enumerate(("reliability", "popularity")):
        v = src[col].to_numpy(float)
        mean_raw[col], sd_raw[col] = float(v[seen].mean()), float(v[seen].std())
        z[:, k] = (v[j] - mean_raw[col]) / sd_raw[col]
    mean_raw["improvement"], sd_raw["improvement"] = float(imp[analysed].mean()), float(imp[analysed].std())
    z[:, 2] = (imp - mean_raw["improvement"]) / sd_raw["improvement"]
    z_rel_src = (src.reliability.to_numpy(float) - mean_raw["reliability"]) / sd_raw["reliability"]

    rho = float(L.source_rel_corr)
    eta, slopes, b_parts = {}, {}, {}
    for part in PARTS:
        mu = np.asarray(MU[part])
        d_s = np.array([STRATEGY_SLOPE.get(s, {}).get(part, (0.0, 0.0, 0.0)) for s in strategies])  # S x 3
        b = (mu[None, None, :] + _effect(rng, 1.0, (n_l, 1, 3)) * np.asarray(TAU_LLM[part])
             + d_s[None, :, :] + _effect(rng, 1.0, (n_l, n_s, 3)) * np.asarray(TAU_CELL[part]))  # L x S x 3
        a = (INTERCEPT[part] + _effect(rng, 0.5, (n_l, 1))
             + np.array([STRATEGY_INTERCEPT.get(s, {}).get(part, 0.0) for s in strategies])[None, :]
             + _effect(rng, 0.2, (n_l, n_s)))
        u = _effect(rng, ITEM_SD[part], n_i)
        v = _effect(rng, LLM_ITEM_SD, (n_l, n_i))
        w = _effect(rng, CELL_ITEM_SD, (n_l, n_s, n_i))
        e = L.source_sd * (rho * z_rel_src + np.sqrt(1 - rho ** 2) * rng.standard_normal(len(src))) \
            if L.source_sd > 0 else np.zeros(len(src))
        x = a[li, si] + (z * b[li, si]).sum(axis=1) + u[ii] + v[li, ii] + w[li, si, ii] + e[j]
        if part == "move":
            c_s = np.array([CORRECT_PRIOR.get(s, CORRECT_PRIOR_OTHER) for s in strategies])
            x = x + c_s[si] * correct
        eta[part] = x
        b_parts[part] = b
        scale = (1.0 - L.heap_half) if part == "fraction" else 1.0
        tot = b.copy()
        tot[..., 0] += rho * L.source_sd
        slopes[part] = scale * tot

    p_move, p_away, p_full = expit(eta["move"]), expit(eta["away"]), expit(eta["full"])
    moved = rng.random(n) < p_move
    away = moved & (rng.random(n) < p_away)
    over_share = np.array([OVERSHOOT_SHARE.get(s, OVERSHOOT_OTHER) for s in strategies])[si]
    overshoot = away & (rng.random(n) < over_share)
    full = moved & ~away & (rng.random(n) < p_full)
    partial = moved & ~away & ~full
    posterior = prior.copy()
    g = 0.05 + rng.gamma(2.0, 0.2, n)
    posterior[overshoot] = (claim * (claim / prior) ** g)[overshoot]
    back = away & ~overshoot
    posterior[back] = (prior * (prior / claim) ** g)[back]
    posterior[full] = claim[full]
    f = np.full(n, 0.5)
    f[partial] = draw_partial_fraction(eta["fraction"][partial], L.heap_half, rng)
    heap = partial & (f == 0.5)
    posterior[partial] = (prior + f * (claim - prior))[partial]
    intended = np.select([~moved, full, partial], ["none", "full", "partial"], "away")

    df = pd.DataFrame({
        "llm": np.asarray(llms)[li], "strategy": np.asarray(strategies)[si], "item_id": np.asarray([f"q{k:04d}" for k in range(n_i)])[ii],
        "truth": truth_v, "source": src.source.to_numpy()[j], "reliability": src.reliability.to_numpy()[j],
        "popularity": src.popularity.to_numpy()[j], "factor": F, "claim": claim,
        "prior": np.where(prior_ok, prior, np.nan), "posterior": np.where(valid, posterior, np.nan), "valid": valid})
    # checks of the generator's own bookkeeping (cheap; the tests repeat them against the package)
    got = classify(prior[analysed], posterior[analysed], claim[analysed])
    if not np.array_equal(got, intended[analysed]):
        raise AssertionError(f"{int((got != intended[analysed]).sum())} rows do not classify as generated")

    A = analysed
    rows = []
    for l in range(n_l):
        for s in range(n_s):
            m = A & (li == l) & (si == s)
            cd = m & (correct == 1)
            pm, pa = p_move[m], p_away[m]
            rows.append({"llm": llms[l], "strategy": strategies[s], "rows": int(m.sum()),
                         "moved": pm.mean(), "away": (pm * pa).mean(),
                         "overshoot": (pm * pa * over_share[m]).mean(),
                         "away_from_claim": (pm * pa * (1 - over_share[m])).mean(),
                         "full": (pm * (1 - pa) * p_full[m]).mean(),
                         "partial": (pm * (1 - pa) * (1 - p_full[m])).mean(),
                         "correct_prior_rows": int(cd.sum()),
                         "correct_defense": float(1 - p_move[cd].mean()) if cd.any() else np.nan,
                         **{f"move_ame_{pred}_pp": float(100 * (pm * (1 - pm)).mean() * slopes["move"][l, s, k])
                            for k, pred in enumerate(PREDICTORS[:2])}})
            rows[-1]["move_ame_popularity - reliability_pp"] = (rows[-1]["move_ame_popularity_pp"]
                                                                 - rows[-1]["move_ame_reliability_pp"])
    slope_rows = []
    for part in PARTS:
        for l in range(n_l):
            for s in range(n_s):
                for k, pred in enumerate(PREDICTORS):
                    slope_rows.append({"part": part, "llm": llms[l], "strategy": strategies[s],
                                       "group": f"{llms[l]} / {strategies[s]}", "term": pred,
                                       "slope": float(slopes[part][l, s, k])})
    st = pd.DataFrame(slope_rows)
    pop = []
    for part in PARTS:
        scale = (1.0 - L.heap_half) if part == "fraction" else 1.0
        d_s = np.array([STRATEGY_SLOPE.get(s, {}).get(part, (0.0, 0.0, 0.0)) for s in strategies])
        val = scale * (np.asarray(MU[part]) + d_s.mean(axis=0) + np.array([rho * L.source_sd, 0, 0]))
        for k, pred in enumerate(PREDICTORS):
            pop.append({"part": part, "term": pred, "population": float(val[k]),
                        "mean_over_groups": float(slopes[part][..., k].mean())})
    truth = {"slopes": st, "population": pd.DataFrame(pop), "rates": pd.DataFrame(rows),
             "sd_raw": sd_raw, "mean_raw": mean_raw, "layout": L, "seed": seed,
             "counts": {"trials": int(n), "valid": int(valid.sum()), "analysed": int(A.sum()),
                        "moved": int((moved & A).sum()), "overshoot": int((overshoot & A).sum()),
                        "away_from_claim": int((back & A).sum()), "full": int((full & A).sum()),
                        "partial": int((partial & A).sum()), "heap_half": int((heap & A).sum())}}
    return df, truth


def with_differences(slopes: pd.DataFrame) -> pd.DataFrame:
    """The slope table plus rows term = "popularity - reliability" per (part, group)."""
    w = slopes.pivot_table(index=["part", "llm", "strategy", "group"], columns="term", values="slope").reset_index()
    d = w[["part", "llm", "strategy", "group"]].assign(term="popularity - reliability",
                                                      slope=w["popularity"] - w["reliability"])
    return pd.concat([slopes, d], ignore_index=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llms", type=int, default=13)
    ap.add_argument("--strategies", type=int, default=5)
    ap.add_argument("--items", type=int, default=344)
    ap.add_argument("--sources", type=int, default=132)
    ap.add_argument("--source-sd", type=float, default=0.5)
    ap.add_argument("--source-rel-corr", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the table here (.csv or .parquet)")
    a = ap.parse_args(argv)
    df, truth = generate(Layout(llms=a.llms, strategies=a.strategies, items=a.items, sources=a.sources,
                                source_sd=a.source_sd, source_rel_corr=a.source_rel_corr), seed=a.seed)
    c = truth["counts"]
    print(f"{c['trials']:,} trials, {c['valid']:,} valid, {c['analysed']:,} analysed (valid, claim != prior); "
          f"of these moved {c['moved'] / c['analysed']:.3f}, overshoot {c['overshoot'] / max(c['moved'], 1):.3f} "
          f"of moves, full {c['full'] / max(c['moved'], 1):.3f} of moves, heap at 0.5 {c['heap_half']:,}")
    print(truth["population"].round(3).to_string(index=False))
    if a.out:
        from discern_stats.store.tables import write_table
        write_table(df, a.out)


if __name__ == "__main__":
    main()
