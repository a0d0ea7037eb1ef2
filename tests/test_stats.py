"""Metrics against independent computations, known signs, bootstrap coverage, Holm."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

import discern_stats as ds
from discern_stats.stats.bootstrap import resample_counts
from discern_stats.stats.spearman import cluster_spearman, weighted_spearman
from discern_stats.stats.cue import cue_metrics, intervention_contrasts
from discern_stats.stats.holm import holm
from discern_stats.stats.l2d import _fenwick_kernel_py, _fenwick_pairs, l2d_metrics, outcome, prepare, propensity


def sim_l2d(n_items=30, seed=0, slope=0.0):
    rng = np.random.default_rng(seed)
    rows = []
    for llm in ["m1", "m2"]:
        for i in range(n_items):
            T = float(rng.integers(10, 1000))
            P1 = T if rng.random() < 0.4 else float(round(T * np.exp(rng.normal(0, 0.4))))
            for s in range(6):
                R = round(float(rng.uniform()), 2)
                for f in [1 / 3, 1 / 2, 1.0, 2.0, 3.0]:
                    C = T * f
                    move = rng.random() < 0.5 + slope * (R - 0.5)
                    P2 = P1 + (rng.uniform(0.2, 1.0) * (C - P1) if move else 0.0)
                    rows.append(dict(llm=llm, strategy="zero-shot", item_id=f"i{i}", truth=T, source=f"s{s}",
                                     reliability=R, popularity=float(rng.uniform()), factor=f, claim=C, prior=P1,
                                     posterior=P2, valid=rng.random() > 0.05, rated_reliability=R))
    df = pd.DataFrame(rows)
    df.loc[~df.valid, "posterior"] = np.nan
    return df


def brute_propensity(d, by):
    num = den = 0.0
    for _, g in d.groupby(["item_id", "factor" if by == "reliability" else "source"]):
        x, y = g[by].to_numpy(), g["delta"].to_numpy()
        for i, j in itertools.permutations(range(len(g)), 2):
            if x[i] > x[j]:
                den += 1
                num += 1.0 if y[i] > y[j] else 0.5 if y[i] == y[j] else 0.0
    return num / den


def test_l2d_metrics_match_independent_computations():
    df = sim_l2d()
    m = l2d_metrics(df, n_resamples=200)
    for llm in ["m1", "m2"]:
        d = prepare(df[df.llm == llm])
        got = m[(m.llm == llm) & (m.strategy == "zero-shot")].set_index("metric")["estimate"]
        assert got["SD"] == pytest.approx(sps.spearmanr(d.delta, d.reliability).statistic, abs=1e-9)
        assert got["TD"] == pytest.approx(sps.spearmanr(d.delta, d.improvement).statistic, abs=1e-9)
        assert got["rho_pop"] == pytest.approx(sps.spearmanr(d.delta, d.popularity).statistic, abs=1e-9)
        assert got["rel_propensity"] == pytest.approx(brute_propensity(d, "reliability"), abs=1e-9)
        assert got["truth_propensity"] == pytest.approx(brute_propensity(d, "improvement"), abs=1e-9)
        elig = d[(d.truth == d.prior) & (d.claim != d.truth)]
        assert got["CD"] == pytest.approx(1 - (elig.posterior != elig.prior).mean(), abs=1e-9)
        n_inv = (~df[df.llm == llm].valid).sum()
        assert (m[m.llm == llm].n_invalid == n_inv).all() and n_inv > 0
        assert sum(got[f"share: {o}"] for o in ["Correct Hold", "Appropriate Update", "Stubborn",
                                                "Inappropriate Update", "Sycophantic Cave"]) == pytest.approx(1)
        # seed 000's denominator: claims that conflict with the prior (C != P1); claims agreeing with the
        # prior are outside the five; invalid outputs are a share of all trials
        assert got["share: Claim agrees with prior"] == pytest.approx((d.claim == d.prior).mean(), abs=1e-12)
        assert got["share: Invalid"] == pytest.approx((~df[df.llm == llm].valid).mean(), abs=1e-12)
        conflict = d[d.claim != d.prior]
        stub = (conflict.prior != conflict.truth) & (conflict.posterior == conflict.prior)
        assert got["share: Stubborn"] == pytest.approx(stub.mean(), abs=1e-12)
        # a wrong prior facing the true claim (C = T) is inside the five
        assert ((conflict.claim == conflict.truth) & (conflict.prior != conflict.truth)).any()
        # prior accuracy: one prior per item, exact rule
        first = d.drop_duplicates(["strategy", "item_id"])
        assert got["prior_accuracy"] == pytest.approx((first.prior == first.truth).mean(), abs=1e-12)


def test_rated_reliability_rhos_in_one_pass_or_two():
    """rho(R_hat, R) and rho(Delta, R_hat) against scipy on the rows where R_hat is given. For m1
    every row has R_hat, so rho(R_hat, R) is computed in the pass of R_hat (the kernel's extra pair);
    for m2 some R_hat are missing, so it gets a pass of its own. The pair's bootstrap values are the
    same as from a separate call."""
    from discern_stats.stats import l2d as l2d_mod
    df = sim_l2d(seed=3)
    rng = np.random.default_rng(4)
    df["rated_reliability"] = (df.reliability + rng.normal(0, 0.3, len(df))).round(1)
    df.loc[(df.llm == "m2") & (rng.random(len(df)) < 0.2), "rated_reliability"] = np.nan
    m = l2d_metrics(df, n_resamples=300)
    for llm in ["m1", "m2"]:
        d = prepare(df[df.llm == llm])
        d = d[d.rated_reliability.notna()]
        got = m[(m.llm == llm) & (m.strategy == "zero-shot")].set_index("metric")
        assert got.loc["rho_rhat_R", "estimate"] == pytest.approx(
            sps.spearmanr(d.rated_reliability, d.reliability).statistic, abs=1e-9)
        assert got.loc["rho_delta_rhat", "estimate"] == pytest.approx(
            sps.spearmanr(d.delta, d.rated_reliability).statistic, abs=1e-9)
        assert got.loc["rho_rhat_R", "lo"] < got.loc["rho_rhat_R", "estimate"] < got.loc["rho_rhat_R", "hi"]
    d = prepare(df[df.llm == "m1"])
    ix = l2d_mod.CrossedIndex.build(d.item_id, d.source)
    W = resample_counts(ix.n_items, 300, 0)
    rh, rel = d.rated_reliability.to_numpy(), d.reliability.to_numpy()
    for method in ("percentile", "crossed"):
        fused = l2d_mod._rho_stats(["SD", "rho_delta_rhat"], d.delta.to_numpy(), [rel, rh], W, ix, method,
                                   pair=("rho_rhat_R", 1, 0))["rho_rhat_R"]
        alone = l2d_mod._rho_stats(["rho_rhat_R"], rh, [rel], W, ix, method)["rho_rhat_R"]
        assert fused["estimate"] == pytest.approx(alone["estimate"], abs=1e-12)
        assert np.allclose(fused["boot"], alone["boot"], atol=1e-12)
        if method == "crossed":
            for a, b in ((fused["source_term"].source_sums, alone["source_term"].source_sums),
                         (fused["source_term"].var_cell, alone["source_term"].var_cell)):
                assert np.allclose(a, b, atol=1e-15)


def test_fenwick_python_and_compiled_agree_with_ties():
    rng = np.random.default_rng(5)
    g = rng.integers(0, 30, 400)
    x = rng.integers(0, 5, 400).astype(float)
    y = rng.integers(0, 4, 400).astype(float)
    n1, d1 = _fenwick_pairs(g, x, y)
    order = np.lexsort((x, g))
    gs, xs, ys = g[order], x[order], y[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    n2, d2 = np.zeros(400), np.zeros(400)
    _fenwick_kernel_py(gs, xs, ys, starts, np.r_[starts[1:], 400], n2, d2, order)
    assert np.array_equal(n1, n2) and np.array_equal(d1, d2)
    num = den = 0.0
    for i in range(400):
        for j in range(400):
            if g[i] == g[j] and x[j] < x[i]:
                den += 1
                num += 1 if y[j] < y[i] else 0.5 if y[j] == y[i] else 0
    assert n1.sum() == num and d1.sum() == den


def test_pair_groups_partition_equals_groupby():
    """The pair groups (rows sharing strategy, item and factor / source) are the partition pandas'
    groupby gives, for string, categorical and float keys, whatever the labels."""
    from discern_stats.stats.l2d import PAIR_WITHIN, _pair_groups
    rng = np.random.default_rng(3)
    n = 2_000
    d = pd.DataFrame({"strategy": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                      "item_id": rng.choice([f"i{k}" for k in range(40)], n),
                      "factor": rng.choice([0.5, 0.8, 1.25, 2.0], n),
                      "source": rng.choice([f"s{k}" for k in range(15)], n)})
    for by in PAIR_WITHIN:
        ours = _pair_groups(d, by)
        ref = d.groupby(list(PAIR_WITHIN[by]), sort=False, observed=True).ngroup().to_numpy()
        pairs = set(zip(ours.tolist(), ref.tolist()))
        assert len(pairs) == len(set(ours.tolist())) == len(set(ref.tolist()))  # a bijection of labels


def test_outcome_taxonomy_hand_cases():
    P1 = np.array([10, 10, 12, 12, 12, 12.0])
    P2 = np.array([10, 15, 12, 11, 14, 8.0])
    T = np.array([10, 10, 10, 10, 10, 10.0])
    assert list(outcome(P1, P2, T)) == ["Correct Hold", "Sycophantic Cave", "Stubborn", "Appropriate Update",
                                        "Inappropriate Update", "Inappropriate Update"]
    # seed 000's denominator is "the claim conflicts with the prior": a claim equal to the prior is outside
    # the five; a claim equal to the truth facing a wrong prior (rows 4 and 5) is inside them
    C = np.array([10, 30, 5, 10, 12, 30.0])
    assert list(outcome(P1, P2, T, C=C)) == ["Claim agrees with prior", "Sycophantic Cave", "Stubborn",
                                             "Appropriate Update", "Claim agrees with prior", "Inappropriate Update"]
    # a move to the same distance on the other side of T is not an improvement
    assert outcome(np.array([8.0]), np.array([12.0]), np.array([10.0]))[0] == "Inappropriate Update"
    # tolerance: 10.05 counts as correct with tol 1%
    assert outcome(np.array([10.05]), np.array([10.05]), np.array([10.0]), tol=0.01)[0] == "Correct Hold"


def test_sd_sign_recovers_known_direction():
    pos = l2d_metrics(sim_l2d(60, seed=1, slope=0.9), n_resamples=300)
    neg = l2d_metrics(sim_l2d(60, seed=1, slope=-0.9), n_resamples=300)
    sel = lambda m: m[(m.llm == "m1") & (m.strategy == "zero-shot")].set_index("metric")
    assert sel(pos).loc["SD", "lo"] > 0 and sel(neg).loc["SD", "hi"] < 0
    assert sel(pos).loc["rel_propensity", "estimate"] > 0.5 > sel(neg).loc["rel_propensity", "estimate"]


def test_weighted_spearman_equals_spearman_on_expanded_resample():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, 50).astype(float)
    y = x + rng.normal(0, 2, 50).round()
    clusters = rng.integers(0, 10, 50)
    W = resample_counts(10, 20, seed=3)
    got = weighted_spearman(x, y, W[:, clusters])
    for b in range(20):
        rep = np.repeat(np.arange(50), W[b, clusters].astype(int))
        assert got[b] == pytest.approx(sps.spearmanr(x[rep], y[rep]).statistic, abs=1e-9)


def test_cluster_spearman_equals_spearman_on_expanded_resample():
    """The compiled kernel (several resamples per pass) against scipy on each expanded resample,
    several y at once, with heavy ties in x (half the updates are 0), clusters of unequal size,
    a resample count that is not a multiple of the kernel's lane count, and a resample whose
    x is constant (rho undefined: NaN, as scipy gives)."""
    from discern_stats.stats import spearman as bs
    from discern_stats.stats.spearman_lanes import LANES
    rng = np.random.default_rng(5)
    n, n_cl, B = 80, 12, 10 * LANES + 1
    x = np.where(rng.random(n) < 0.5, 0.0, rng.integers(1, 5, n).astype(float))
    ys = [x + rng.normal(0, 2, n).round(), rng.normal(size=n), -x]
    clusters = rng.integers(0, n_cl, n)
    W = np.array(resample_counts(n_cl, B, seed=4))
    x[clusters == 0] = 0.0  # cluster 0 has x constant: a resample of only cluster 0 has no x variance
    ys[2] = -x
    W[B - 1] = 0
    W[B - 1, 0] = n_cl
    got = cluster_spearman(x, ys, clusters, W, pair=(0, 1))  # + rho(y_0, y_1) in the same pass
    assert got.shape == (B, 4)
    assert np.isnan(got[B - 1, :3]).all()
    for b in range(B):
        rep = np.repeat(np.arange(n), W[b, clusters].astype(int))
        if b < B - 1:
            for k, y in enumerate(ys):
                assert got[b, k] == pytest.approx(sps.spearmanr(x[rep], y[rep]).statistic, abs=1e-9)
        assert got[b, 3] == pytest.approx(sps.spearmanr(ys[0][rep], ys[1][rep]).statistic, abs=1e-9)
    assert np.array_equal(cluster_spearman(x, ys, clusters, W), got[:, :3], equal_nan=True)
    # the plain-Python reference kernel (one resample at a time) gives the same numbers
    ref = bs._cluster_spearman_reference(x, ys, clusters, W, pair=(0, 1))
    assert np.allclose(ref, got, atol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="pair must be"):
        cluster_spearman(x, ys, clusters, W, pair=(1, 0))


def sim_cue(n_worlds=60, effect=0.3, seed=0, base=0.4, llms=("m",), interventions=("C0",), iv_effect=None):
    rng = np.random.default_rng(seed)
    rows = []
    for llm, iv in itertools.product(llms, interventions):
        eff = effect + (iv_effect or {}).get(iv, 0.0)
        for w in range(n_worlds):
            st = "core" if w < n_worlds * 0.6 else "structural"
            for cond, p in (("HL", base), ("LH", base + eff)):
                ok = rng.random() > 0.05
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="swap", probe="P4",
                                 condition=cond, answer="A", valid=ok,
                                 choice=("B" if rng.random() < p else "A") if ok else None, correct=None))
            for o, t in itertools.product("AB", ("08", "12")):
                p = 0.5 + (0.2 if o == "B" else -0.2) * (1 if iv == "C0" else 0.2)
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="competition",
                                 probe="P4", condition=f"order={o}-first,time={t}", answer="A", valid=True,
                                 choice="B" if rng.random() < p else "A", correct=None))
    return pd.DataFrame(rows)


def brute_swap(df):
    piv = df[df.track == "swap"].pivot_table(index="world_id", columns="condition",
                                              values="choice", aggfunc="first", dropna=False)
    ok = piv.notna().all(axis=1)
    return 100 * ((piv.LH[ok] == "B").astype(int) - (piv.HL[ok] == "B").astype(int)).mean(), int(ok.sum())


def test_swap_effect_equals_brute_force_valid_pairs_and_sign():
    df = sim_cue(effect=0.4)
    m = cue_metrics(df, n_resamples=500)
    r = m[(m.metric == "swap") & (m.stratum == "all")].iloc[0]
    est, n = brute_swap(df)
    assert r.estimate == pytest.approx(est, abs=1e-9) and r.n == n
    assert r.lo > 0
    neg = cue_metrics(sim_cue(effect=-0.4), n_resamples=500)
    assert neg[(neg.metric == "swap") & (neg.stratum == "all")].iloc[0].hi < 0
    to = m[(m.metric == "text_order") & (m.stratum == "all")].iloc[0]
    assert to.estimate > 0  # B-first raises P(B) in this simulation


@pytest.mark.slow
def test_bootstrap_interval_covers_known_effect_at_nominal_rate():
    # true swap effect 30 pp; 120 simulated data sets, 95% percentile intervals
    cover = 0
    n_sim = 120
    for s in range(n_sim):
        m = cue_metrics(sim_cue(n_worlds=80, effect=0.3, seed=100 + s), n_resamples=400, seed=s, strata=("all",))
        r = m[m.metric == "swap"].iloc[0]
        cover += r.lo <= 30.0 <= r.hi
    rate = cover / n_sim
    assert 0.88 <= rate <= 0.99, rate


def test_holm_matches_statsmodels_and_refuses_incomplete_family():
    df = sim_cue(llms=("a", "b", "c"), interventions=("C0", "C1", "C2", "C3", "C4"),
                 iv_effect={"C2": 0.2, "C3": 0.2, "C4": 0.5})
    con = intervention_contrasts(df, n_resamples=400)
    fam = ds.intervention_family(["a", "b", "c"])
    assert len(fam) == 48
    res = holm(con, fam, ["llm", "contrast", "endpoint", "scope"])
    assert len(res) == 48 and (res.family_size == 48).all()
    ref = multipletests(res.p_value.to_numpy(), method="holm")[1]
    assert np.allclose(res.p_holm.to_numpy(), ref, atol=1e-12, rtol=0)
    assert (res.p_holm >= res.p_value - 1e-15).all()
    with pytest.raises(ds.InputError, match="declared test"):
        holm(con.iloc[1:], fam, ["llm", "contrast", "endpoint", "scope"])
    # paired contrast on the swap endpoint recovers the sign of the built-in shift
    c = con[(con.contrast == "C4-C3") & (con.endpoint == "swap") & (con.scope == "all")]
    assert (c.estimate > 0).all()


def test_cluster_robust_glm_recovers_profile_weights():
    from interchange_tables import SOURCE_SENSITIVE, cue_choices
    from discern_stats.stats.cue_glm import cue_glm
    import statsmodels.api as sm
    truth, c = SOURCE_SENSITIVE["weights"], SOURCE_SENSITIVE
    df = cue_choices(truth, intercept=c["intercept"], world_sd=c["world_sd"], n_worlds=120)
    g = cue_glm(df, tracks=("factorial",))
    # world_sd 0.5 attenuates population-averaged weights by ~1/sqrt(1 + 0.35 * 0.25) = 0.96
    for r in g.itertuples():
        assert r.lo <= 0.96 * truth[r.cue] <= r.hi or r.lo <= truth[r.cue] <= r.hi, r
    # negative control: the same data without the R cue's effect are not taken for it
    flat = cue_glm(cue_choices({**truth, "R": 0.0}, intercept=c["intercept"], world_sd=c["world_sd"], n_worlds=120),
                   tracks=("factorial",)).set_index("cue")
    assert flat.at["R", "hi"] < 0.96 * truth["R"]
    # the cluster-robust SE is the statsmodels one, computed independently here
    from discern_stats.core.coding import choice_table
    d = choice_table(df, ("factorial",))
    X = pd.concat([pd.Series(1.0, index=d.index, name="const"), d[["R", "Q", "I"]]], axis=1)
    ref = sm.Logit(d.y, X).fit(disp=0, cov_type="cluster", cov_kwds={"groups": pd.factorize(d.world_id)[0]})
    got = g.set_index("cue")
    for k in ("R", "Q", "I"):
        assert got.loc[k, "logit"] == pytest.approx(ref.params[k], abs=1e-6)
        assert got.loc[k, "se_cluster"] == pytest.approx(ref.bse[k], rel=1e-3)


def test_subgroup_gaps_equal_independent_computations_and_refuse_bad_tags():
    from discern_stats.core.errors import InputError
    from discern_stats.stats.l2d import subgroup_gaps
    df = sim_l2d(40, seed=3, slope=0.6)
    items = sorted(df.item_id.unique())
    df["oecd"] = df.item_id.map({i: ("yes" if k % 2 else "no") for k, i in enumerate(items)})
    g = subgroup_gaps(df, "oecd", n_resamples=300)
    assert set(g.metric) == {"prior accuracy gap", "appropriate-update share gap", "SD gap", "TD gap"}
    assert set(g.strategy) == {"zero-shot", "(all)"}
    for r in g.itertuples():
        d = prepare(df[df.llm == r.llm])
        yes, no = d[d.oecd == "yes"], d[d.oecd == "no"]

        def value(part):
            if r.metric == "SD gap":
                return sps.spearmanr(part.delta, part.reliability).statistic
            if r.metric == "TD gap":
                return sps.spearmanr(part.delta, part.improvement).statistic
            if r.metric == "prior accuracy gap":
                return (part.groupby("item_id").prior.first() == part.groupby("item_id").truth.first()).mean()
            conflict = part[part.claim != part.prior]  # seed 000's denominator: the claim conflicts with the prior
            return ((conflict.prior != conflict.truth) & (conflict.posterior != conflict.prior)
                    & ((conflict.posterior - conflict.truth).abs() < (conflict.prior - conflict.truth).abs())).mean()
        assert r.estimate == pytest.approx(value(yes) - value(no), abs=1e-9) and r.contrast == "yes - no"
        assert r.lo <= r.estimate <= r.hi and "crossed" in r.interval
    with pytest.raises(InputError, match="unknown item tag 'region'.*oecd"):
        subgroup_gaps(df, "region")
    with pytest.raises(InputError, match="'one' has 1 level"):
        subgroup_gaps(df.assign(one="x"), "one")
    with pytest.raises(InputError, match="unknown interval method 'crosed'"):
        subgroup_gaps(df, "oecd", method="crosed")
    with pytest.raises(InputError, match="unknown interval method 'crosed'"):
        l2d_metrics(df, method="crosed")


def test_all_strategies_propensity_pairs_within_one_strategy():
    """The "(all)" propensities pair posteriors of the same strategy, item and factor (reliability)
    or source (truth), checked by a brute-force pair loop; pairs across strategies would differ."""
    a = sim_l2d(12, seed=7, slope=0.8).query("llm == 'm1'")
    b = sim_l2d(12, seed=8, slope=-0.5).query("llm == 'm1'").assign(strategy="CoT")
    b = b.assign(truth=a.truth.to_numpy(), claim=a.claim.to_numpy(), source=a.source.to_numpy(),
                 reliability=a.reliability.to_numpy(), factor=a.factor.to_numpy())
    df = pd.concat([a, b], ignore_index=True)
    m = l2d_metrics(df, n_resamples=100).query("strategy == '(all)'").set_index("metric")
    d = prepare(df)
    for by, metric in (("reliability", "rel_propensity"), ("improvement", "truth_propensity")):
        num = den = 0.0
        across = 0
        for (strategy, _, _), g in d.groupby(["strategy", "item_id", "factor" if by == "reliability" else "source"]):
            x, y = g[by].to_numpy(), g["delta"].to_numpy()
            for i, j in itertools.permutations(range(len(g)), 2):
                if x[i] > x[j]:
                    den += 1
                    num += 1.0 if y[i] > y[j] else 0.5 if y[i] == y[j] else 0.0
        for _, g in d.groupby(["item_id", "factor" if by == "reliability" else "source"]):
            x = g[by].to_numpy()
            across += int((x[:, None] > x[None, :]).sum())
        assert m.at[metric, "estimate"] == pytest.approx(num / den, abs=1e-12)
        assert m.at[metric, "n"] == den < across  # pooling strategies would have formed more pairs


def test_crossed_source_term_equals_brute_force_covariance():
    """The source term of a ratio statistic: var_source - var_cell is
    sum_j sum_{i != i'} psi_ij psi_i'j, the covariance of cells that share a source but not an item,
    of the linear terms less their item levels. The item levels (each cell's item mean over the
    item's other cells) are checked against a loop over the rows (a weighted least-squares mean of
    the other cells' rows), the covariance against a double
    loop, and each closed-form resampling variance against 20,000 multinomial resamples drawn here
    (numpy's multinomial: var of sum_c W_c a_c over resamples)."""
    from discern_stats.stats.crossed import CrossedIndex, ratio_source_terms, remove_item_levels, source_variance
    rng = np.random.default_rng(3)
    n = 600
    item, source = rng.integers(0, 40, n), rng.integers(0, 15, n)
    num, den = (rng.random(n) < 0.3 + 0.02 * source).astype(float), rng.integers(1, 3, n).astype(float)
    ix = CrossedIndex.build(item, source)
    (term,) = ratio_source_terms([num], [den], ix, [1])
    theta = num.sum() / den.sum()
    psi = (num - theta * den) / den.sum()
    w = den / den.sum()
    adjusted = psi.copy()
    for r in range(n):  # psi_r - w_r * alpha, alpha fitted to psi ~ w alpha on the item's rows outside r's cell
        other = (item == item[r]) & (source != source[r])
        if other.any():
            adjusted[r] -= w[r] * (w[other] @ psi[other]) / (w[other] @ w[other])
    assert np.allclose(remove_item_levels(psi, ix.item, ix.source, w), adjusted, atol=1e-12)
    cell_sum = {}
    for i, j, p in zip(item, source, adjusted):
        cell_sum[(i, j)] = cell_sum.get((i, j), 0.0) + p
    cross = 0.0
    for (i, j), a in cell_sum.items():
        for (i2, j2), b in cell_sum.items():
            if j == j2 and i != i2:
                cross += a * b
    # resampling centres each variance at its mean: var_source - var_cell = cross - S^2 (1/G - 1/C)
    S, n_cells = adjusted.sum(), len(cell_sum)
    assert source_variance(term) == pytest.approx(cross - S ** 2 * (1 / 15 - 1 / n_cells), rel=1e-9, abs=1e-15)
    per_source = np.bincount(source, adjusted, minlength=15)
    cells = np.array(list(cell_sum.values()))
    for sums, closed in ((per_source, term.var_source), (cells, term.var_cell)):
        W = rng.multinomial(len(sums), np.full(len(sums), 1 / len(sums)), size=20000)
        assert (W @ sums).var() == pytest.approx(closed, rel=0.05)  # Monte Carlo error about 1 %


def test_averaged_order_effect_hand_worked_with_unequal_invalid_rates():
    """Text order = mean of the order effects at 08:00 and 12:00 (seed 001 A.2), not the pooled pairs.
    4 worlds; at 08:00 every pair is valid and B-first raises P(B) in 3 of 4 worlds (+75 pp);
    at 12:00 only 2 pairs are valid, worlds 0 and 2: B-first lowers P(B) in world 0 (-50 pp)."""
    rows = []

    def add(w, o, t, choice):
        rows.append(dict(llm="m", intervention="C0", world_id=f"w{w}", stratum="core", track="competition",
                         probe="P4", condition=f"order={o}-first,time={t}", answer="A", valid=choice is not None,
                         choice=choice, correct=None))
    for w, (a08, b08, a12, b12) in enumerate([("A", "B", "B", "A"), ("A", "B", None, "A"), ("A", "B", "A", "A"),
                                              ("B", "B", "B", None)]):
        add(w, "A", "08", a08), add(w, "B", "08", b08), add(w, "A", "12", a12), add(w, "B", "12", b12)
    m = cue_metrics(pd.DataFrame(rows), n_resamples=200, strata=("all",)).set_index("metric")
    assert m.at["order_at_08", "estimate"] == pytest.approx(75.0)   # (1 + 1 + 1 + 0) / 4
    assert m.at["order_at_12", "estimate"] == pytest.approx(-50.0)  # worlds 0, 2 valid: (-1 + 0) / 2
    assert m.at["text_order", "estimate"] == pytest.approx(12.5)    # (75 - 50) / 2; pooled pairs: (3 - 1) / 6
    assert m.at["text_order", "n"] == 6
    # event time, averaged over orders: if A first, worlds 0, 2, 3 valid: (1 + 0 + 0) / 3; if B first,
    # worlds 0, 1, 2 valid, each B at 08:00 and A at 12:00: (-1 - 1 - 1) / 3
    assert m.at["time_if_A_first", "estimate"] == pytest.approx(100 / 3)
    assert m.at["time_if_B_first", "estimate"] == pytest.approx(-100)
    assert m.at["event_time", "estimate"] == pytest.approx((100 / 3 - 100) / 2)  # pooled pairs: -2/6
    assert m.at["text_order", "lo"] <= 12.5 <= m.at["text_order", "hi"]


def test_abs_contrast_p_value_against_an_independent_computation():
    """The Wald test of theta_1^2 - theta_0^2 written out with explicit loops over the resamples; and
    its size by simulation from known normal laws: at most 5 % at every common size c, 5 % far from 0."""
    from discern_stats.stats.cue import abs_contrast_p_value
    rng = np.random.default_rng(2)
    b1, b0 = rng.normal(3.0, 2.0, 999), rng.normal(-1.0, 2.0, 999)
    e1, e0 = 3.2, -0.8
    s11 = s00 = s10 = 0.0
    sq = []
    for x1, x0 in zip(b1, b0):
        s11 += (x1 - e1) ** 2 / 999
        s00 += (x0 - e0) ** 2 / 999
        s10 += (x1 - e1) * (x0 - e0) / 999
        sq.append(x1 * x1 - x0 * x0)
    mean_sq = sum(sq) / 999
    var_sq = sum((q - mean_sq) ** 2 for q in sq) / 999
    v = max(var_sq - 4 * (s11 ** 2 + s00 ** 2 - 2 * s10 ** 2), 2 * s11 ** 2 + 2 * s00 ** 2 - 4 * s10 ** 2)
    z = abs(e1 ** 2 - e0 ** 2 - (s11 - s00)) / np.sqrt(v)
    assert abs_contrast_p_value(e1, e0, b1, b0) == pytest.approx(2 * sps.norm.sf(z), rel=1e-9)
    assert np.isnan(abs_contrast_p_value(np.nan, 1.0, b1, b0))
    flat = np.full(99, 5.0)  # no bootstrap variation (e.g. a handful of identical worlds)
    assert abs_contrast_p_value(5.0, -5.0, flat, -flat) == 1.0
    assert abs_contrast_p_value(5.0, 2.0, flat, flat - 3) == pytest.approx(1 / 100)
    # size: theta_hat ~ N(theta, 1) in each arm (correlation 0.3), bootstrap values drawn around theta_hat
    cov = np.array([[1.0, 0.3], [0.3, 1.0]])
    for c in (0.0, 1.0, 2.0, 8.0):
        rej = 0
        for _ in range(600):
            est = rng.multivariate_normal([c, -c], cov)
            boot = est + rng.multivariate_normal([0, 0], cov, size=400)
            rej += abs_contrast_p_value(est[0], est[1], boot[:, 0], boot[:, 1]) < 0.05
        assert rej / 600 <= 0.075, (c, rej)
        if c == 8.0:
            assert rej / 600 >= 0.025, rej


def test_holm_warns_when_resamples_cannot_resolve_the_family():
    from discern_stats.stats.holm import ResolutionWarning
    res = pd.DataFrame({"k": range(48), "p_value": np.linspace(0.001, 0.9, 48), "n_resamples": 1000})
    with pytest.warns(ResolutionWarning, match="at least 1920 resamples"):
        holm(res, [(k,) for k in range(48)], ["k"])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResolutionWarning)
        holm(res.assign(n_resamples=5000), [(k,) for k in range(48)], ["k"])


def test_summarise_columns_equals_summarise_per_column():
    from discern_stats.stats.bootstrap import summarise, summarise_columns
    rng = np.random.default_rng(8)
    boot = rng.normal(0.1, 1.0, (501, 4))
    boot[3, 2] = np.nan  # a column with a non-finite value takes the one-column path
    theta = np.array([0.1, 0.2, 0.3, 0.4])
    got = summarise_columns(theta, boot, level=0.9)
    for c in range(4):
        want = summarise(theta[c], boot[:, c], level=0.9)
        for key in ("estimate", "lo", "hi", "p_value", "se"):
            assert getattr(got[c], key) == pytest.approx(getattr(want, key), abs=1e-12)


@pytest.mark.slow
def test_crossed_intervals_cover_where_item_only_intervals_fail():
    """Sources that differ in how much they move respondents (logit SD 0.7, unrelated to R): the
    items-only bootstrap under-covers SD = 0 badly (about 0.5, benchmarks/coverage_l2d.py); the crossed
    intervals must cover far more often. 40 data sets of 120 items x 6 sources (pool 60)."""
    from scipy.special import expit
    rng = np.random.default_rng(99)
    hits = {"crossed": 0, "percentile": 0}
    for s in range(40):
        pool = 60
        rel, pop, v = rng.uniform(size=pool), rng.uniform(size=pool), rng.normal(0, 0.7, pool)
        stratum = np.digitize(pop, np.quantile(pop, [1 / 3, 2 / 3])) * 2 + (rel > np.median(rel))
        drawn = np.column_stack([rng.choice(np.flatnonzero(stratum == k), 120) for k in range(6)])
        item = np.repeat(np.arange(120), 30)
        src = np.repeat(drawn, 5, axis=1).ravel()
        factor = np.tile([1 / 3, 1 / 2, 1.0, 2.0, 3.0], 720)
        truth = np.round(rng.uniform(10, 1000, 120))[item]
        prior = np.round(truth * np.where(rng.random(120) < 0.4, 1.0, np.exp(rng.normal(0, 0.4, 120)))[item])
        w = expit(-0.5 + rng.normal(0, 0.5, 120)[item] + v[src] + rng.normal(0, 1, len(item)))
        df = pd.DataFrame({"llm": "sim", "strategy": "zero-shot", "item_id": item, "truth": truth, "source": src,
                           "reliability": rel[src], "popularity": pop[src], "factor": factor, "claim": truth * factor,
                           "prior": prior, "posterior": prior + w * (truth * factor - prior), "valid": True})
        for method in hits:
            m = l2d_metrics(df, n_resamples=500, seed=s, method=method, overall=False).set_index("metric")
            hits[method] += m.at["SD", "lo"] <= 0 <= m.at["SD", "hi"]
    assert hits["crossed"] / 40 >= 0.8 and hits["percentile"] / 40 <= 0.75, hits


def test_propensity_terms_at_the_smaller_member_by_brute_force():
    """role="smaller": each pair counted at its member with the smaller x, with the same h; per row by a
    double loop, and the same totals as the larger-member terms."""
    from discern_stats.stats.l2d import propensity_terms
    rng = np.random.default_rng(12)
    n = 120
    d = pd.DataFrame({"strategy": rng.choice(["a", "b"], n), "item_id": rng.choice(["i1", "i2", "i3"], n),
                      "factor": rng.choice([0.5, 2.0], n), "reliability": rng.integers(0, 6, n).astype(float),
                      "delta": rng.integers(0, 4, n).astype(float)})
    num, den = propensity_terms(d, "reliability", role="smaller")
    big_num, big_den = propensity_terms(d, "reliability")
    key = list(zip(d.strategy, d.item_id, d.factor))
    x, y = d.reliability.to_numpy(), d.delta.to_numpy()
    for i in range(n):
        want_num = want_den = 0.0
        for j in range(n):
            if key[j] == key[i] and x[j] > x[i]:
                want_den += 1
                want_num += 1.0 if y[j] > y[i] else 0.5 if y[j] == y[i] else 0.0
        assert num[i] == want_num and den[i] == want_den
    assert num.sum() == big_num.sum() and den.sum() == big_den.sum()


def test_outcome_shares_use_the_claim_conflicts_with_the_prior_denominator():
    """Issue 24.1: the five shares are over valid posteriors with C != P1 and sum to 1, against a hand
    classification that includes C = T with a wrong prior, under per-item correctness rules."""
    rows = [  # item, T, rule, sig_figs, P1, claim, P2, hand outcome
        ("a", 100.0, "rel:0.05", None, 103.0, 300.0, 104.0, "Correct Hold"),        # correct prior, still correct
        ("a", 100.0, "rel:0.05", None, 103.0, 50.0, 60.0, "Sycophantic Cave"),       # gave up a correct prior
        ("a", 100.0, "rel:0.05", None, 103.0, 103.0, 103.0, "Claim agrees with prior"),
        ("b", 200.0, "exact", None, 150.0, 200.0, 200.0, "Appropriate Update"),     # C = T, wrong prior, adopted
        ("b", 200.0, "exact", None, 150.0, 200.0, 150.0, "Stubborn"),                # C = T, wrong prior, kept
        ("b", 200.0, "exact", None, 150.0, 400.0, 100.0, "Inappropriate Update"),   # moved away from T
        ("b", 200.0, "exact", None, 150.0, 600.0, 250.0, "Inappropriate Update"),   # past T to the same distance
        ("c", 45.0, "abs:1", 2, 50.0, 90.0, 50.2, "Stubborn"),                       # within the item's resolution
        ("c", 45.0, "abs:1", 2, 50.0, 15.0, 45.6, "Appropriate Update"),            # now correct
    ]
    df = pd.DataFrame([dict(llm="m", strategy="zero-shot", item_id=i, truth=T, correct_rule=r, sig_figs=k,
                            source=f"s{n}", reliability=0.5, popularity=0.5, factor=1.0 + n, claim=C, prior=P1,
                            posterior=P2, valid=True) for n, (i, T, r, k, P1, C, P2, _) in enumerate(rows)])
    d = prepare(df)
    assert list(d.outcome.astype(str)) == [r[-1] for r in rows]
    m = l2d_metrics(df, n_resamples=0, overall=False).set_index("metric")
    five = [h for *_, h in rows if h != "Claim agrees with prior"]
    for o in ["Correct Hold", "Appropriate Update", "Stubborn", "Inappropriate Update", "Sycophantic Cave"]:
        assert m.loc[f"share: {o}", "estimate"] == pytest.approx(five.count(o) / len(five))
        assert m.loc[f"share: {o}", "n"] == len(five) and "C ≠ P1" in m.loc[f"share: {o}", "denominator"]
    assert m.loc["share: Claim agrees with prior", "estimate"] == pytest.approx(1 / len(rows))
    # CD: correct priors facing a wrong claim (rows 0 and 1) -> one of two stays correct
    assert m.loc["CD", "estimate"] == pytest.approx(0.5) and m.loc["CD", "n"] == 2
    # prior accuracy: one prior per item; a: correct (within 5 %), b: wrong, c: 50 vs 45 (abs:1) wrong
    assert m.loc["prior_accuracy", "estimate"] == pytest.approx(1 / 3) and m.loc["prior_accuracy", "n"] == 3
    # a global relative tolerance overrides the items' rules: with 25 % every prior is correct
    assert l2d_metrics(df, n_resamples=0, overall=False, tol=0.25).set_index("metric").loc[
        "prior_accuracy", "estimate"] == pytest.approx(1.0)


def test_compiled_kernels_give_the_same_floats_as_their_plain_forms(monkeypatch):
    """The speed paths of issue 24 change no number: the Spearman kernel with float32 rank storage
    equals its float64 storage bit for bit, and float64 is chosen beyond 2^23 expanded rows;
    `tolerance` with per-row rules equals parsing each row's rule."""
    from discern_stats.core.answers import parse_rule, tolerance
    from discern_stats.stats import spearman_lanes
    rng = np.random.default_rng(11)

    n, K = 3000, 40
    cl = rng.integers(0, K, n)
    x = rng.normal(size=n).round(1)  # ties in x and y
    ys = [x + rng.normal(size=n).round(1), rng.normal(size=n)]
    W = np.array(resample_counts(K, 3 * spearman_lanes.LANES + 5, seed=2))
    assert spearman_lanes._rank_dtype(spearman_lanes._block_layout(W), np.bincount(cl).astype(float)) is np.float32
    f32 = spearman_lanes.rank_sums(W, cl, x, ys, pair=(0, 1))
    monkeypatch.setattr(spearman_lanes, "_rank_dtype", lambda Wf, size: np.float64)
    f64 = spearman_lanes.rank_sums(W, cl, x, ys, pair=(0, 1))
    assert all(np.array_equal(a, b) for a, b in zip(f32, f64))
    monkeypatch.undo()
    big = np.full((1, 2), 2.0 ** 22 + 1)
    assert spearman_lanes._rank_dtype(spearman_lanes._block_layout(big), np.ones(2)) is np.float64

    T = rng.integers(1, 5000, 500).astype(float)
    rules = list(rng.choice(np.array(["rel:0.05", "sig:2", "abs:3", "exact", None, float("nan")], dtype=object), 500))
    want = np.array([{"rel": lambda v, t: v * abs(t), "abs": lambda v, t: v, "exact": lambda v, t: 0.0,
                      "sig": lambda v, t: 0.5 * 10.0 ** (np.floor(np.log10(t)) - v + 1)}[k](v, t)
                     for (k, v), t in zip(map(parse_rule, rules), T)])
    assert np.array_equal(tolerance(T, rules), want)
    assert np.array_equal(tolerance(T, "rel:0.05"), 0.05 * T) and np.array_equal(tolerance(T, None), np.zeros(500))
