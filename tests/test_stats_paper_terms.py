"""Issue 24: the statistics on the paper's terms (declared Holm family, boundary proportions, the
|order| contrast's test and interval, the small-cluster correction, subgroup gap direction)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from discern_stats.core.errors import InputError
from discern_stats.core.vocab import INTERVENTIONS
from discern_stats.stats.cue import holm_contrasts, intervention_contrasts, intervention_family


def cue_rows(llm: str, interventions, n_worlds: int = 16, seed: int = 0, order_w: float = 0.2) -> list[dict]:
    """Swap and order x time choices of ``n_worlds`` worlds (60 % Core) for one LLM."""
    rng = np.random.default_rng(seed)
    rows = []
    for iv in interventions:
        for w in range(n_worlds):
            st = "core" if w < n_worlds * 0.6 else "structural"
            for cond, p in (("HL", 0.4), ("LH", 0.7)):
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="swap", probe="P4",
                                 condition=cond, answer="A", valid=True, correct=None,
                                 choice="B" if rng.random() < p else "A"))
            for o, t in itertools.product("AB", ("08", "12")):
                p = 0.5 + (order_w if o == "B" else -order_w)
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="competition",
                                 probe="P4", condition=f"order={o}-first,time={t}", answer="A", valid=True,
                                 correct=None, choice="B" if rng.random() < p else "A"))
    return rows


def paper_shaped_cue() -> pd.DataFrame:
    """Seed 001's plan: 13 LLMs at C0 only, 3 of them (others) through C0-C4."""
    rows = []
    for k in range(13):
        rows += cue_rows(f"base{k:02d}", ["C0"], seed=k)
    for k, m in enumerate(["full-a", "full-b", "full-c"]):
        rows += cue_rows(m, INTERVENTIONS, seed=100 + k)
    return pd.DataFrame(rows)


def test_declared_family_covers_the_llms_with_every_intervention():
    df = paper_shaped_cue()
    res = holm_contrasts(df, n_resamples=400)
    full = ["full-a", "full-b", "full-c"]
    assert len(res) == 48 and (res.family_size == 48).all()
    assert sorted(res.llm.unique()) == full
    assert (res.family_llms == ", ".join(full)).all()
    assert res.left_out_llms.iloc[0] == ", ".join(f"base{k:02d}" for k in range(13))
    # the same family, the same p-values as the contrasts of the three LLMs alone, Holm as statsmodels
    alone = intervention_contrasts(df[df.llm.isin(full)], n_resamples=400)
    merged = res.merge(alone, on=["llm", "contrast", "endpoint", "scope"], suffixes=("", "_alone"))
    assert len(merged) == 48 and np.allclose(merged.p_value, merged.p_value_alone, rtol=0, atol=0)
    assert np.allclose(res.p_holm, multipletests(res.p_value, method="holm")[1], rtol=0, atol=1e-12)
    assert set(map(tuple, res[["llm", "contrast", "endpoint", "scope"]].to_numpy())) == set(intervention_family(full))


def test_declared_family_refuses_an_incomplete_plan_within_its_llms():
    df = paper_shaped_cue()
    # an LLM collected beyond C0 but missing C4: an incomplete plan, not a smaller family
    partial = df[~((df.llm == "full-b") & (df.intervention == "C4"))]
    with pytest.raises(InputError, match="'full-b' was collected under C0, C1, C2, C3 but not C4"):
        holm_contrasts(partial, n_resamples=200)
    # a declared test without a result within the covered LLMs (no Core world of full-c at C3)
    no_core = df[~((df.llm == "full-c") & (df.intervention == "C3") & (df.stratum == "core"))]
    with pytest.raises(InputError, match="declared test"):
        holm_contrasts(no_core, n_resamples=200)


# ---------------------------------------------------------------- Design A: boundary proportions

from statsmodels.stats.proportion import proportion_confint  # noqa: E402

from discern_stats.stats.l2d import l2d_metrics  # noqa: E402
from discern_stats.stats.crossed import crossed_se_interval, wilson  # noqa: E402


def l2d_frame(n_items: int = 40, pool: int = 30, seed: int = 0, cave: float = 0.0) -> pd.DataFrame:
    """Items x sources crossed (6 sources per item from a pool, 5 factors). A correct prior gives way
    to a wrong claim with probability ``cave`` (0: CD is 1 and Sycophantic Cave 0 exactly); a wrong
    prior moves half-way to the claim with probability 0.5."""
    rng = np.random.default_rng(seed)
    rel, pop = rng.uniform(size=pool), rng.uniform(size=pool)
    rows = []
    for i in range(n_items):
        T = float(rng.integers(100, 1000))
        P1 = T if rng.random() < 0.5 else float(round(T * 1.3))
        for s in rng.choice(pool, 6, replace=False):
            for f in (1 / 3, 1 / 2, 1.0, 2.0, 3.0):
                C = T * f
                if P1 == T:
                    P2 = C if (C != T and rng.random() < cave) else P1
                else:
                    P2 = P1 + 0.5 * (C - P1) if rng.random() < 0.5 else P1
                rows.append(dict(llm="m", strategy="zero-shot", item_id=f"i{i}", truth=T, source=f"s{s}",
                                 reliability=rel[s], popularity=pop[s], factor=f, claim=C, prior=P1, posterior=P2,
                                 valid=True))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("method", ["crossed", "percentile"])
def test_boundary_proportions_get_finite_non_degenerate_intervals(method):
    df = l2d_frame()
    m = l2d_metrics(df, n_resamples=400, method=method, overall=False).set_index("metric")
    n_items = df[df.prior == df.truth].item_id.nunique()  # the items CD rests on
    for metric, at in (("CD", 1.0), ("share: Sycophantic Cave", 0.0)):
        r = m.loc[metric]
        assert r.estimate == at
        assert 0.0 <= r.lo < r.hi <= 1.0 and r.lo <= r.estimate <= r.hi, r
    # at the bound the clustering cannot be estimated: Wilson with one trial per item, by statsmodels
    lo, hi = proportion_confint(n_items, n_items, alpha=0.05, method="wilson")
    if method == "percentile":
        assert (m.loc["CD", "lo"], m.loc["CD", "hi"]) == pytest.approx((lo, hi), abs=1e-12)
    else:  # Student t (small-cluster correction) in place of z: a little wider, same shape
        assert m.loc["CD", "lo"] < lo and m.loc["CD", "hi"] == 1.0
    p = m.loc["CD", "p_value"]
    assert np.isfinite(p) and 0 < p < 0.05  # CD = 1 against chance 0.5 over ~20 items: clearly not chance
    assert np.isfinite(m.loc["rel_propensity", "p_value"])


def test_wilson_with_effective_n_against_statsmodels_and_the_score_test():
    # interior: n_eff = p (1 - p) / se^2 (at most n); Wilson of statsmodels at that n_eff (normal z)
    p, se, n = 0.022, 0.012, 1401
    iv = crossed_se_interval(p, se ** 2, 0.0, level=0.95, chance=None, bounds=(0, 1), proportion=(n, 60))
    n_eff = p * (1 - p) / se ** 2
    assert iv["n_eff"] == pytest.approx(n_eff)
    want = proportion_confint(p * n_eff, n_eff, alpha=0.05, method="wilson")
    assert (iv["lo"], iv["hi"]) == pytest.approx(want, abs=1e-12)
    assert iv["lo"] > 0  # the clipped Wald interval would start at 0 here: 0.022 - 1.96 * 0.012 < 0
    # the p-value is the score test the interval inverts: it excludes chance exactly when p < 0.05
    for est in np.linspace(0.30, 0.70, 41):
        r = crossed_se_interval(est, 0.004, 0.001, level=0.95, chance=0.5, bounds=(0, 1), proportion=(500, 40),
                                n_items=40, n_sources=12)
        assert (r["p_value"] < 0.05) == (not r["lo"] <= 0.5 <= r["hi"]), est
    # negative control: a degenerate share never has zero width, never a NaN p-value
    r = crossed_se_interval(1.0, 0.0, 0.0, level=0.95, chance=0.5, bounds=(0, 1), proportion=(605, 25))
    assert r["hi"] == 1.0 and r["lo"] == pytest.approx(wilson(1.0, 25, 1.959963984540054)[0]) and r["lo"] < 0.9
    assert np.isfinite(r["p_value"])


# ---------------------------------------------------------------- Design B: the |order| contrast

from discern_stats.stats.bootstrap import boot_p_value  # noqa: E402
from discern_stats.stats.cue import abs_contrast_test, percentile_inversion_interval  # noqa: E402


def test_percentile_inversion_is_exactly_the_set_the_p_value_does_not_reject():
    rng = np.random.default_rng(7)
    for B in (19, 200, 999):
        b = np.round(rng.normal(2.0, 1.5, B), 1)  # ties on purpose
        lo, hi = percentile_inversion_interval(b, 0.05)
        if B == 19:  # p >= 2 / 20 always: nothing is rejected
            assert (lo, hi) == (-np.inf, np.inf)
            continue
        for t in np.unique(np.r_[b, b - 1e-9, b + 1e-9, lo, hi]):
            assert (boot_p_value(b - t) >= 0.05) == (lo <= t <= hi), (B, t)
    assert percentile_inversion_interval(np.arange(10.0), 0.05) == (-np.inf, np.inf)  # B = 10 cannot reject


def test_abs_contrast_iut_p_value_and_its_interval_agree_by_construction():
    rng = np.random.default_rng(8)
    n_disagree = n_reject = 0
    for k in range(300):
        t1, t0 = rng.choice([-6.0, -3.0, 0.0, 3.0, 6.0], 2)
        cov = np.array([[4.0, 1.2], [1.2, 4.0]])
        est = rng.multivariate_normal([t1, t0], cov)
        boot = est + rng.multivariate_normal([0, 0], cov, size=499)
        r = abs_contrast_test(est[0], est[1], boot[:, 0], boot[:, 1])
        # p: the larger of the two paired-bootstrap p-values, written out
        d, s = boot[:, 0] - boot[:, 1], boot[:, 0] + boot[:, 1]
        p_d = min(1, 2 * min((d <= 0).sum() + 1, (d >= 0).sum() + 1) / 500)
        p_s = min(1, 2 * min((s <= 0).sum() + 1, (s >= 0).sum() + 1) / 500)
        assert r["p_value"] == pytest.approx(max(p_d, p_s), abs=1e-15)
        assert r["estimate"] == pytest.approx(abs(est[0]) - abs(est[1]))
        assert r["lo"] <= r["estimate"] <= r["hi"]
        excludes = not (r["lo"] <= 0 <= r["hi"])
        n_disagree += excludes != (r["p_value"] < 0.05)
        n_reject += excludes
        if k < 40:  # the interval is the range of |t1| - |t0| over the rectangle of the two inverted intervals
            (dl, dh), (sl, sh) = percentile_inversion_interval(d, 0.05), percentile_inversion_interval(s, 0.05)
            gd, gs = np.meshgrid(np.linspace(dl, dh, 401), np.linspace(sl, sh, 401))
            vals = np.abs((gd + gs) / 2) - np.abs((gs - gd) / 2)
            assert vals.min() >= r["lo"] - 1e-9 and vals.max() <= r["hi"] + 1e-9
            assert vals.min() == pytest.approx(r["lo"], abs=0.02 * (dh - dl + sh - sl))
            assert vals.max() == pytest.approx(r["hi"], abs=0.02 * (dh - dl + sh - sl))
    assert n_disagree == 0
    assert 20 < n_reject < 280  # negative control: both outcomes occur in this set


def test_abs_contrast_in_the_contrast_table_agrees_with_its_p_value():
    rows = cue_rows("m", ["C0"], n_worlds=40, seed=1, order_w=0.25) + cue_rows("m", ["C2"], n_worlds=40, seed=2,
                                                                                  order_w=0.0)
    con = intervention_contrasts(pd.DataFrame(rows), contrasts=[("C2", "C0")], n_resamples=999)
    ab = con[con.endpoint == "abs_text_order"]
    assert len(ab) == 2
    for r in ab.itertuples():
        assert (r.p_value < 0.05) == (not r.lo <= 0 <= r.hi)
        assert r.estimate == pytest.approx(r.arm1 - r.arm0)


def test_contrast_table_caption_names_the_family_and_the_abs_order_test():
    from discern_stats.report.tables import contrasts_table
    res = holm_contrasts(paper_shaped_cue(), n_resamples=200)

    class Ctx:  # the few context methods the table reads
        def has(self, design):
            return design == "cue"

        def contrasts(self):
            return res

        def model(self, kind):
            return None

        def llm_table(self):
            return pd.DataFrame({"name": sorted(res.llm.unique()), "is_simulator": False})

    html = contrasts_table(Ctx()).as_raw_html().replace("\u00a0", " ")
    assert "family of 48 (the LLMs collected under every intervention: full-a, full-b, full-c)" in html
    assert "Baseline-only LLMs, outside the family: base00" in html
    assert "intersection-union test" in html and "excludes 0 exactly when p &lt; 0.05" in html


# ---------------------------------------------------------------- Design A: subgroup gaps on the paper's terms

from discern_stats.stats.l2d import subgroup_gaps  # noqa: E402


def tagged_frame() -> pd.DataFrame:
    df = l2d_frame(n_items=24, seed=3, cave=0.3)
    item_no = df.item_id.str[1:].astype(int)
    df["era"] = np.where(item_no % 2 == 0, "pre-internet", "post-internet")
    df["oecd"] = np.where(item_no % 3 == 0, "yes", "no")
    # items i1 and i3 (post-internet): no number for the prior in any trial -> invalid priors
    bad = df.item_id.isin(["i1", "i3"])
    df.loc[bad, "prior"] = np.nan
    df.loc[bad, "posterior"] = np.nan
    df.loc[bad, "valid"] = False
    return df


def test_subgroup_gaps_follow_the_papers_direction_and_count_invalid_priors_as_wrong():
    df = tagged_frame()
    g = subgroup_gaps(df, "era", n_resamples=200, overall=False).set_index("metric")
    assert (g.contrast == "post-internet - pre-internet").all()  # not the alphabetical pre - post
    o = subgroup_gaps(df, "oecd", n_resamples=0, overall=False)
    assert (o.contrast == "yes - no").all()
    # prior accuracy by hand, one prior per item; an invalid prior is wrong, never dropped
    acc = {}
    for lv, part in df.groupby("era"):
        first = part.drop_duplicates("item_id")
        acc[lv] = float((first.prior == first.truth).sum() / len(first))
    assert g.loc["prior accuracy gap", "estimate"] == pytest.approx(acc["post-internet"] - acc["pre-internet"])
    assert g.loc["prior accuracy gap", "n_invalid_prior"] == 2
    assert g.loc["prior accuracy gap", "n"] == df.item_id.nunique()
    # negative control: dropping the invalid priors instead would give another gap
    kept = df[df.prior.notna()].drop_duplicates("item_id")
    dropped = kept.groupby("era").apply(lambda p: (p.prior == p.truth).mean(), include_groups=False)
    assert g.loc["prior accuracy gap", "estimate"] != pytest.approx(dropped["post-internet"] - dropped["pre-internet"])
    # an explicit reference flips the sign; an unknown one is a user error
    r = subgroup_gaps(df, "era", n_resamples=200, overall=False, reference="post-internet").set_index("metric")
    assert (r.contrast == "pre-internet - post-internet").all()
    for m in ("prior accuracy gap", "SD gap", "TD gap"):
        assert r.loc[m, "estimate"] == pytest.approx(-g.loc[m, "estimate"])
    with pytest.raises(InputError, match="reference level 'modern' is not a level of item tag 'era'"):
        subgroup_gaps(df, "era", n_resamples=0, reference="modern")
    assert g.p_adjustment.str.contains("not adjusted across LLMs").all()
    m = l2d_metrics(df, n_resamples=0, overall=False).set_index("metric")
    assert "not adjusted" in m.loc["SD", "p_adjustment"] and m.loc["share: Stubborn", "p_adjustment"] == ""


def _item_levels_left_out_by_rows(values, item, source, w):
    """The independent reference: for each row, its item's level fitted (values ~ w alpha, weighted least
    squares) on the item's rows outside the row's own (item, source) cell, by a loop over the rows."""
    out = values.astype(float).copy()
    for r in range(len(values)):
        other = (item == item[r]) & (source != source[r])
        if other.any():
            out[r] -= w[r] * (w[other] @ values[other]) / (w[other] @ w[other])
    return out


def test_item_levels_left_out_on_cells_equal_the_loop_over_rows():
    """`remove_item_levels` from cell sums equals the row loop (weights, items with one cell kept raw)."""
    from discern_stats.stats.crossed import CrossedIndex, remove_item_levels
    rng = np.random.default_rng(9)
    item = rng.integers(0, 40, 1500)
    source = rng.integers(0, 25, 1500)
    item[source == 3] = 40  # item 40: one cell only
    ix = CrossedIndex.build(item, source)
    v = rng.normal(size=1500) + rng.normal(size=41)[ix.item] + rng.normal(size=25)[ix.source]
    w = rng.uniform(0.5, 2.0, 1500)
    want = _item_levels_left_out_by_rows(v, ix.item, ix.source, w)
    assert np.allclose(remove_item_levels(v, ix.item, ix.source, w, cell=ix.cell), want, atol=1e-10, rtol=0)
    assert np.allclose(remove_item_levels(v, ix.item, ix.source, w), want, atol=1e-10, rtol=0)
    lone = ix.item == ix.item[np.flatnonzero(item == 40)[0]]
    assert np.array_equal(remove_item_levels(v, ix.item, ix.source, w)[lone], v[lone])
    assert not np.allclose(want, v)  # negative control: something is removed


def test_resample_variance_is_the_multinomial_variance_of_a_linear_statistic():
    """sum a^2 - (sum a)^2 / G is the exact variance of sum_c w_c a_c for multinomial counts of G
    draws over G clusters: against the covariance matrix of the multinomial (scipy), and for a
    difference of two terms on the same sources (the subgroup gap) the source sums subtract while the
    cell variances add."""
    from scipy import stats as sps
    from discern_stats.stats.crossed import SourceTerm, resample_variance
    rng = np.random.default_rng(8)
    a = rng.normal(size=12)
    cov = sps.multinomial(12, np.full(12, 1 / 12)).cov()
    assert resample_variance(a) == pytest.approx(a @ cov @ a, rel=1e-12)
    assert resample_variance(np.full(5, 3.0)) == pytest.approx(0.0, abs=1e-12)  # a constant shift does not move
    t1, t2 = SourceTerm(a, 0.2), SourceTerm(rng.normal(size=12), 0.3)
    gap = t1.minus(t2)
    assert np.allclose(gap.source_sums, t1.source_sums - t2.source_sums) and gap.var_cell == pytest.approx(0.5)


def test_cli_contrasts_on_the_papers_plan(tmp_path):
    """`metrics cue --contrasts-out` on 13 C0-only and 3 C0-C4 LLMs (it stopped with '16 declared test(s)
    have no result'): 48 contrasts over the three, the CLI names them; an incomplete plan: one line, exit 2."""
    from typer.testing import CliRunner
    import discern_stats as ds
    from discern_stats.cli import app
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'trials.db'}"
    ds.TrialDB(url).import_trials("cue", paper_shaped_cue())
    out = tmp_path / "c.csv"
    r = runner.invoke(app, ["metrics", "cue", "--resamples", "200", "--out", str(tmp_path / "m.csv"),
                            "--contrasts-out", str(out), "--db", url])
    assert r.exit_code == 0, r.output
    assert "Holm family of 48 over the LLMs with every intervention: full-a, full-b, full-c" in r.output
    assert "baseline-only LLMs left out: base00" in r.output
    assert len(pd.read_csv(out)) == 48
    url2 = f"sqlite:///{tmp_path / 'partial.db'}"
    df = paper_shaped_cue()
    ds.TrialDB(url2).import_trials("cue", df[~((df.llm == "full-b") & (df.intervention == "C4"))])
    r = runner.invoke(app, ["metrics", "cue", "--resamples", "200", "--out", str(tmp_path / "m2.csv"),
                            "--contrasts-out", str(tmp_path / "c2.csv"), "--db", url2])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "'full-b' was collected under C0, C1, C2, C3 but not C4" in r.output
    assert not (tmp_path / "c2.csv").exists() and not (tmp_path / "m2.csv").exists()  # no partial output


def _crossed_rows(n_items: int = 40, n_sources: int = 12, per_item: int = 4, seed: int = 0) -> pd.DataFrame:
    """Items x sources with source effects on moving (each item meets ``per_item`` distinct sources of
    the pool, so sources recur across items), 5 factors per item x source, 5 % invalid."""
    rng = np.random.default_rng(seed)
    u, rel = rng.normal(0, 1.2, n_sources), rng.uniform(size=n_sources)
    rows = []
    for i in range(n_items):
        T = float(rng.integers(10, 1000))
        P1 = T if rng.random() < 0.4 else float(round(T * np.exp(rng.normal(0, 0.4))))
        a = rng.normal(0, 0.7)
        for j in rng.choice(n_sources, per_item, replace=False):
            for f in [1 / 3, 1 / 2, 1.0, 2.0, 3.0]:
                C = T * f
                imp = abs(P1 - T) - abs(C - T)
                move = rng.random() < 1 / (1 + np.exp(-(a + u[j] + 0.8 * np.sign(imp))))
                rows.append(dict(llm="m", strategy="zero-shot", item_id=f"i{i}", truth=T, source=f"s{j}",
                                 reliability=rel[j], popularity=float(rng.uniform()), factor=f, claim=C, prior=P1,
                                 posterior=P1 + (rng.uniform(0.2, 1.0) * (C - P1) if move else 0.0),
                                 valid=rng.random() > 0.05))
    df = pd.DataFrame(rows)
    df.loc[~df.valid, "posterior"] = np.nan
    return df


def test_truth_propensity_source_term_is_the_cell_ratio_covariance():
    """Truth-propensity pairs lie within one item x source cell, so the statistic is the ratio of cell
    sums sum_c N_c / sum_c D_c and its source term is sum_j sum_{c != c' in j} psi_c psi_c' of the cell
    linear terms psi_c = (N_c - theta D_c) / D, each pair once, less item levels (issue 24: the pair at
    both of its members doubled every cell's term, 4x the variance). Brute force: a pair loop per cell
    (each pair at the row with the larger I), item levels left out cell by cell by a loop over the
    rows, the covariance by a double loop; against the package's replicates at 20,000 resamples."""
    from discern_stats.stats.crossed import CrossedIndex, source_variance
    from discern_stats.stats.l2d import _group_stats, prepare
    g = prepare(_crossed_rows(), keep_invalid=True)
    st = _group_stats(g, n_resamples=50, seed=1, method="crossed")["truth_propensity"]
    d = g[g.valid.to_numpy(bool)].reset_index(drop=True)
    num, den = np.zeros(len(d)), np.zeros(len(d))
    for _, c in d.groupby(["item_id", "source"]):
        x, y = c["improvement"].to_numpy(), c["delta"].to_numpy()
        for a, b in itertools.permutations(range(len(c)), 2):
            if x[a] > x[b]:
                r = c.index[a]
                den[r] += 1
                num[r] += 1.0 if y[a] > y[b] else 0.5 if y[a] == y[b] else 0.0
    theta = num.sum() / den.sum()
    assert st["estimate"] == pytest.approx(theta, abs=1e-12)
    ix = CrossedIndex.build(d["item_id"], d["source"])
    w = den / den.sum()
    adjusted = _item_levels_left_out_by_rows((num - theta * den) / den.sum(), ix.item, ix.source, w)
    cells: dict[tuple[int, int], float] = {}
    for i, j, p in zip(ix.item, ix.source, adjusted):
        cells[(i, j)] = cells.get((i, j), 0.0) + p
    cross = sum(a * b for (i, j), a in cells.items() for (i2, j2), b in cells.items() if j == j2 and i != i2)
    assert cross > 0  # the source effects give the cells of one source a common level
    S, G, C = adjusted.sum(), ix.n_sources, len(cells)  # each resampling variance centred at its mean
    assert source_variance(st["source_term"]) == pytest.approx(cross - S ** 2 * (1 / G - 1 / C), rel=1e-9)


def test_source_df_runs_from_g_minus_h_without_a_source_term_to_half_of_it_where_it_dominates():
    """source_df = (G_source - H) / (1 + r): G - H where var_source is all cell noise (r = 0), half of
    it where it is all source term (r = 1), 1 / df linear in r between; r clipped to [0, 1], a
    non-finite r taken as 1 (the conservative end), never below 1."""
    from discern_stats.stats.crossed import source_df
    assert source_df(20, 6, 0.0) == 14.0
    assert source_df(20, 6, 1.0) == 7.0
    assert source_df(21, 1, 0.25) == pytest.approx(20 / 1.25, rel=1e-12)
    assert 1 / source_df(60, 6, 0.5) == pytest.approx((1 / source_df(60, 6, 0) + 1 / source_df(60, 6, 1)) / 2)
    assert source_df(20, 6, -0.3) == 14.0 and source_df(20, 6, 4.0) == 7.0
    assert source_df(20, 6, float("nan")) == 7.0
    assert source_df(7, 6, 1.0) == 1.0


def test_small_cluster_df_counts_the_source_term_as_a_difference_of_two_variances():
    """Satterthwaite (1946) for V = V_item + (var_source - var_cell): hand-worked
    df = V^2 / (V_item^2 / (G_item - 1) + var_source^2 / ((G_source - 1) / (1 + r))), r the source
    term's share of var_source, each component first scaled by G / (G - 1); the interval is
    estimate +- t_df sqrt(V) (scipy's t quantile)."""
    from scipy import stats as sps
    from discern_stats.stats.crossed import SourceTerm, crossed_interval, resample_variance, small_cluster_df
    # hand-worked: 100 items, 21 sources, r = 1e-4 / 5e-4 = 0.2 (df_source = 20 / 1.2):
    # 2.5e-7 / (1.6e-7 / 99 + 2.5e-7 / (20 / 1.2))
    assert small_cluster_df(4e-4, 1e-4, 100, 21, 5e-4) == pytest.approx(2.5e-7 / (1.6e-7 / 99 + 2.5e-7 * 1.2 / 20),
                                                                      rel=1e-12)
    # without var_source it is taken as the source term itself (var_cell = 0, r = 1: df_source = 10)
    assert small_cluster_df(4e-4, 1e-4, 100, 21) == pytest.approx(2.5e-7 / (1.6e-7 / 99 + 1e-8 / 10), rel=1e-12)
    # a small source term that is the difference of two large variances is far less certain
    assert small_cluster_df(4e-4, 1e-4, 100, 21, 5e-4) < small_cluster_df(4e-4, 1e-4, 100, 21) / 5
    assert small_cluster_df(1e-6, 1e-4, 100, 3, 1e-2) == 1.0  # never below 1
    # crossed_interval passes var_source on: a source term with known variances
    rng = np.random.default_rng(4)
    boot, sums = rng.normal(0, 0.02, 400), rng.normal(0, 0.03, 15)
    term = SourceTerm(sums, 0.3 * resample_variance(sums))
    vi, a, c = boot.var(ddof=1) * 30 / 29, term.var_source * 15 / 14, term.var_cell * 15 / 14
    v = vi + (a - c)
    df = v ** 2 / (vi ** 2 / 29 + a ** 2 * (1 + (a - c) / a) / 14)  # r = 0.7 of var_source is source term
    iv = crossed_interval(0.1, boot, term, level=0.95, chance=0.0, bounds=(-1, 1), n_items=30, n_sources=15)
    assert iv["df"] == pytest.approx(df, rel=1e-9)
    assert iv["hi"] - 0.1 == pytest.approx(sps.t.ppf(0.975, df) * np.sqrt(v), rel=1e-9)
    assert iv["p_value"] == pytest.approx(2 * sps.t.sf(0.1 / np.sqrt(v), df), rel=1e-9)


def test_spearman_linear_terms_are_the_derivative_of_rho_in_each_rows_weight():
    """`spearman_influence` against central differences of `weighted_spearman` (itself scipy's
    spearmanr on expanded data) in each row's weight, with ties in both variables; the terms sum to 0
    (rho is homogeneous of degree 0 in the weights) and the rho is scipy's."""
    from scipy import stats as sps
    from discern_stats.stats.spearman import spearman_influence, weighted_spearman
    rng = np.random.default_rng(5)
    for n, levels in ((25, None), (60, 4)):
        x = rng.normal(size=n) if levels is None else rng.integers(0, levels, n).astype(float)
        y = np.round(0.4 * x + rng.normal(size=n), 1)
        rho, psi = spearman_influence(x, y)
        assert rho == pytest.approx(sps.spearmanr(x, y)[0], abs=1e-12)
        h = 1e-5
        for k in range(n):
            up, down = np.ones(n), np.ones(n)
            up[k], down[k] = 1 + h, 1 - h
            numeric = (weighted_spearman(x, y, up)[0] - weighted_spearman(x, y, down)[0]) / (2 * h)
            assert psi[k] == pytest.approx(numeric, abs=1e-8)
        assert abs(psi.sum()) < 1e-12
    assert np.isnan(spearman_influence(np.ones(5), np.arange(5.0))[0])


def test_spearman_source_term_matches_the_source_bootstrap_of_rho():
    """The closed-form source variance of a rho's linear terms against re-ranking 3,000 source resamples
    (`cluster_spearman`, scipy-exact on each expanded resample): with 200 sources they agree to Monte
    Carlo error (seeds 0-5: 0.95-1.05 of the re-ranked variance). Every row its own item here,
    so no item levels enter: the comparison is of the linearisation alone."""
    from discern_stats.stats.bootstrap import resample_counts
    from discern_stats.stats.crossed import CrossedIndex, linear_source_terms
    from discern_stats.stats.spearman import cluster_spearman, spearman_influence
    rng = np.random.default_rng(6)
    n_src, per = 200, 15
    source = np.repeat(np.arange(n_src), per)
    pop = rng.uniform(size=n_src)[source]
    x = np.round(0.3 * pop + rng.normal(0, 0.3, n_src)[source] + rng.normal(0, 0.5, len(source)), 1)
    ix = CrossedIndex.build(np.arange(len(source)), source)
    psi = spearman_influence(x, pop)[1]
    (term,) = linear_source_terms([psi], ix)
    rerank = cluster_spearman(x, [pop], ix.source, resample_counts(n_src, 3000, 2))[:, 0]
    assert term.var_source == pytest.approx(rerank.var(), rel=0.08)  # 3,000 resamples: Monte Carlo SE ~2.6 %
    assert term.var_source > 3 * (psi ** 2).sum()  # the rows of a source move together: not the rows' variance


def test_stratified_resample_variance_is_the_within_stratum_multinomial_variance():
    """Resampling within strata (counts of each stratum summing to its size) moves sum_c w_c a_c by
    sum_h a_h' Cov_h a_h, Cov_h the covariance of a multinomial over the stratum's G_h clusters
    (scipy); a shift of one stratum's level does not move it (the design holds each stratum's share
    fixed), where the unstratified variance counts it."""
    from scipy import stats as sps
    from discern_stats.stats.crossed import SourceTerm, resample_variance
    rng = np.random.default_rng(11)
    strata = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2])
    a = rng.normal(size=strata.size)
    want = sum(a[strata == h] @ sps.multinomial(int((strata == h).sum()), np.full((strata == h).sum(), 1 / (strata == h).sum())).cov()
               @ a[strata == h] for h in range(3))
    assert resample_variance(a, strata) == pytest.approx(want, rel=1e-12)
    shifted = a + np.array([5.0, -3.0, 2.0])[strata]
    assert resample_variance(shifted, strata) == pytest.approx(want, rel=1e-12)
    assert resample_variance(shifted) > 10 * want  # negative control: between-strata levels count unstratified
    term = SourceTerm(shifted, 0.0, strata)
    assert term.n_strata == 3 and term.var_source == pytest.approx(want, rel=1e-12)
    assert term.minus(SourceTerm(a, 0.0, strata)).n_strata == 3
    assert term.minus(SourceTerm(a, 0.0)).n_strata == 1  # strata only where both sides have them


def _planned_trials(per_stratum: int = 1, n_items: int = 30, seed: int = 0) -> pd.DataFrame:
    """The item x source layout of the package's own Design A plan (demo sources: 4 per stratum)."""
    from discern_stats.designs import l2d
    items = pd.DataFrame({"item_id": [f"q{i:02d}" for i in range(n_items)], "question": "How many?",
                          "truth": 10.0 + np.arange(n_items)})
    plan = l2d.build_requests(items, l2d.demo_sources(), seed=seed, per_stratum=per_stratum, strategies=("zero-shot",))
    post = pd.DataFrame([r for r in plan.requests if r["stage"] == "posterior"])
    src = l2d.demo_sources().rename(columns={"domain": "source"})
    return post.merge(src[["source", "reliability", "popularity"]], on="source")


def test_design_strata_are_found_in_the_packages_plan_and_nowhere_else():
    """The crossed source term takes the sources as drawn within the popularity x reliability strata
    exactly where the data show the design's draw: the package's plan (1 or 2 sources per stratum
    and item) has its 6 strata recovered from the trials alone, equal to the design's own tiers;
    sources drawn at random (items meet the strata unevenly), a stratum with a single source, or a
    source without a popularity give the unstratified term."""
    from discern_stats.designs import l2d
    from discern_stats.stats.crossed import CrossedIndex
    from discern_stats.stats.l2d import design_strata
    tiers = l2d.stratify_sources(l2d.demo_sources()).set_index("domain")
    for per in (1, 2):
        d = _planned_trials(per)
        strata = design_strata(d)
        assert strata.nunique() == 6
        assert set(strata.index) == set(tiers.index)  # every demo source is met
        assert (strata == (tiers.pop_tier + "/" + tiers.rel_tier).reindex(strata.index)).all()
        ix = CrossedIndex.build(d.item_id, d.source, source_strata=strata)
        assert ix.source_stratum is not None and len(set(ix.source_stratum)) == 6
    random_draw = l2d_frame()  # 6 sources per item at random from 30
    assert CrossedIndex.build(random_draw.item_id, random_draw.source,
                              source_strata=design_strata(random_draw)).source_stratum is None
    d = _planned_trials(1)
    lone = d[~d.source.isin(strata[strata == "low/low"].index[1:])]  # one source left in a stratum
    assert CrossedIndex.build(lone.item_id, lone.source, source_strata=design_strata(d)).source_stratum is None
    assert design_strata(d.assign(popularity=np.where(d.source == d.source.iloc[0], np.nan, d.popularity))) is None


def test_design_strata_are_read_from_the_items_even_where_a_pool_source_was_never_drawn():
    """A pool of 24 sources, 4 per stratum cut at fixed thresholds (popularity 1/3, 2/3; reliability
    1/2), every item one source per stratum, and the two most popular low/high sources never drawn:
    `design_strata` gives every met source its true stratum, where re-cutting the met sources into
    tertiles (`source_tiers`) misplaces some; with the sources drawn at random it gives None."""
    from discern_stats.core.vocab import source_tiers
    from discern_stats.stats.l2d import design_strata
    rng = np.random.default_rng(11)
    pt, rt = np.repeat([0, 1, 2], 8), np.tile(np.repeat([0, 1], 4), 3)
    pop = (pt + rng.uniform(0.05, 0.95, 24)) / 3
    rel = (rt + rng.uniform(0.05, 0.95, 24)) / 2
    truth = pd.Series([f"{'low mid high'.split()[a]}/{'low high'.split()[b]}" for a, b in zip(pt, rt)],
                      index=[f"s{j:02d}" for j in range(24)])
    low_high = np.flatnonzero((pt == 0) & (rt == 1))
    unused = low_high[np.argsort(pop[low_high])[-2:]]
    rows = []
    for i in range(40):
        for h in range(6):
            members = [j for j in np.flatnonzero((pt == h // 2) & (rt == h % 2)) if j not in unused]
            j = rng.choice(members)
            rows.append({"item_id": i, "source": f"s{j:02d}", "popularity": pop[j], "reliability": rel[j]})
    d = pd.DataFrame(rows)
    got = design_strata(d)
    assert len(got) == 22 and (got == truth.reindex(got.index)).all()
    met = d.drop_duplicates("source").set_index("source")
    p_t, r_t = source_tiers(met.popularity, met.reliability)
    assert ((p_t + "/" + r_t) != truth.reindex(met.index)).any()  # the re-cut would misplace some
    d_random = d.assign(source=rng.choice(truth.index.drop(truth.index[unused]), len(d)))
    d_random[["popularity", "reliability"]] = [[pop[int(s[1:])], rel[int(s[1:])]] for s in d_random.source]
    assert design_strata(d_random) is None


def _stratified_plan_trials(n_items: int = 40, seed: int = 3) -> pd.DataFrame:
    """Trials on the package's plan (one source per stratum and item) whose moves depend on reliability."""
    from interchange_tables import l2d_reliability_moves
    return l2d_reliability_moves(_planned_trials(1, n_items=n_items), seed)


def test_crossed_metrics_use_the_within_strata_source_term_on_a_stratified_plan():
    """On the package's plan the source term of SD (a rho of Delta with a stratifying attribute) is
    the within-strata variance of the source sums of its raw linear terms (hand: d rho / d w from
    `spearman_influences`, summed per source and per cell, grouped by the design's tiers), scaled by
    G / (G - 6) with (G - 6) / (1 + r) degrees of freedom on the source part; TD and the ratios (CD) keep
    the unstratified term of their item-removed linear terms."""
    from discern_stats.stats.crossed import (CrossedIndex, linear_source_terms, ratio_linear_terms,
                                             spearman_linear_terms)
    from discern_stats.stats.l2d import STRATIFIED_RHOS, _group_stats, design_strata, prepare
    from discern_stats.stats.spearman import spearman_influences
    assert set(STRATIFIED_RHOS) == {"SD", "rho_pop"}
    g = prepare(_stratified_plan_trials(), keep_invalid=True)
    st = _group_stats(g, n_resamples=200, seed=0, method="crossed", source_strata=design_strata(g))
    ix = CrossedIndex.build(g.item_id, g.source)
    tier = design_strata(g).reindex(sorted(g.source.unique())).to_numpy()
    term = st["SD"]["source_term"]
    assert term.n_strata == 6
    _, (psi,) = spearman_influences(g.delta.to_numpy(), [g.reliability.to_numpy()])
    sums = pd.Series(np.bincount(ix.source, psi))
    cells = pd.DataFrame({"a": psi, "cell": ix.cell, "tier": tier[ix.source]}).groupby("cell").agg(
        a=("a", "sum"), tier=("tier", "first"))
    within = lambda s, by: sum(((v - v.mean()) ** 2).sum() for _, v in s.groupby(by))  # noqa: E731
    assert term.var_source == pytest.approx(within(sums, tier), rel=1e-9)
    assert term.var_cell == pytest.approx(within(cells.a, cells.tier.to_numpy()), rel=1e-9)
    (removed,) = spearman_linear_terms(g.delta.to_numpy(), [g.reliability.to_numpy()], ix)
    assert not np.allclose(removed, psi)  # raw, not item-removed
    # TD and CD: unstratified, item-removed linear terms
    (td,) = linear_source_terms(spearman_linear_terms(g.delta.to_numpy(), [g.improvement.to_numpy()], ix), ix)
    assert st["TD"]["source_term"].n_strata == 1
    assert st["TD"]["source_term"].var_source == pytest.approx(td.var_source, rel=1e-9)
    elig = (g.prior_correct & g.claim_wrong).to_numpy()
    (cd,) = linear_source_terms([ratio_linear_terms((elig & g.posterior_correct).to_numpy(float),
                                                    elig.astype(float), ix)], ix)
    assert st["CD"]["source_term"].n_strata == 1
    assert st["CD"]["source_term"].var_source == pytest.approx(cd.var_source, rel=1e-9)
    # the interval: V_source scaled by G / (G - 6), var_source on (G - 6) / (1 + r) degrees of freedom
    from scipy import stats as sps
    from discern_stats.stats.crossed import crossed_interval, source_variance
    G, n_i = int(g.source.nunique()), int(g.item_id.nunique())
    b = st["SD"]["boot"]
    vi, vs, gross = b.var(ddof=1) * n_i / (n_i - 1), source_variance(term) * G / (G - 6), term.var_source * G / (G - 6)
    df = (vi + vs) ** 2 / (vi ** 2 / (n_i - 1) + gross ** 2 * (1 + vs / gross) / (G - 6))
    iv = crossed_interval(0.5, b, term, level=0.95, chance=0.0, bounds=(-1, 1), n_items=n_i, n_sources=G)
    assert iv["df"] == pytest.approx(df, rel=1e-9)
    assert iv["hi"] - 0.5 == pytest.approx(sps.t.ppf(0.975, df) * np.sqrt(vi + vs), rel=1e-9)


def test_fixed_strata_take_every_metrics_source_term_within_the_strata():
    """``fixed_strata``: TD (raw linear terms, like SD) and the ratios (item-removed linear terms) take
    their source term within the design's strata: hand-computed within-tier variances of the source
    sums and of the cell sums; the estimates and the item bootstrap do not move, the intervals do."""
    from discern_stats.stats.crossed import CrossedIndex, ratio_linear_terms
    from discern_stats.stats.l2d import _group_stats, design_strata, l2d_metrics, prepare
    from discern_stats.stats.spearman import spearman_influences
    g = prepare(_stratified_plan_trials(), keep_invalid=True)
    strata = design_strata(g)
    st = _group_stats(g, n_resamples=200, seed=0, method="crossed", source_strata=strata, fixed_strata=True)
    default = _group_stats(g, n_resamples=200, seed=0, method="crossed", source_strata=strata)
    ix = CrossedIndex.build(g.item_id, g.source)
    tier = strata.reindex(sorted(g.source.unique())).to_numpy()
    within = lambda s, by: sum(((v - v.mean()) ** 2).sum() for _, v in s.groupby(by))  # noqa: E731

    def check(term, psi):
        sums = pd.Series(np.bincount(ix.source, psi))
        cells = pd.DataFrame({"a": psi, "cell": ix.cell, "tier": tier[ix.source]}).groupby("cell").agg(
            a=("a", "sum"), tier=("tier", "first"))
        assert term.n_strata == 6
        assert term.var_source == pytest.approx(within(sums, tier), rel=1e-9)
        assert term.var_cell == pytest.approx(within(cells.a, cells.tier.to_numpy()), rel=1e-9)

    _, (td,) = spearman_influences(g.delta.to_numpy(), [g.improvement.to_numpy()])
    check(st["TD"]["source_term"], td)
    assert default["TD"]["source_term"].n_strata == 1
    elig = (g.prior_correct & g.claim_wrong).to_numpy()
    check(st["CD"]["source_term"], ratio_linear_terms((elig & g.posterior_correct).to_numpy(float),
                                                      elig.astype(float), ix))
    for m in ("SD", "TD", "CD", "rel_propensity"):
        assert st[m]["estimate"] == default[m]["estimate"]
        np.testing.assert_array_equal(st[m]["boot"], default[m]["boot"])
    d = _stratified_plan_trials(n_items=30)
    with pytest.warns(Warning):
        a = l2d_metrics(d, n_resamples=200, overall=False, fixed_strata=True).set_index("metric")
    assert a["interval"].str.contains("every metric's source term within the design's 6").all()


def test_fixed_strata_refuse_data_without_strata_and_other_methods():
    """One clear InputError, not a silent fallback: no design strata in the data, or a method with no
    source term."""
    from discern_stats.core.errors import InputError
    from discern_stats.stats.l2d import l2d_metrics
    d = _stratified_plan_trials(n_items=30)
    with pytest.raises(InputError, match="crossed intervals only"):
        l2d_metrics(d, n_resamples=50, overall=False, method="percentile", fixed_strata=True)
    src = np.sort(d.source.unique())  # popularity shuffled between sources: no thresholds fit every item
    pop = d.groupby("source")["popularity"].first().reindex(src).to_numpy()
    shuffled = dict(zip(src, np.random.default_rng(5).permutation(pop)))
    with pytest.raises(InputError, match="no design strata"):
        l2d_metrics(d.assign(popularity=d.source.map(shuffled)), n_resamples=50, overall=False, fixed_strata=True)


def test_l2d_metrics_take_the_design_strata_for_sd_and_rho_pop_only(monkeypatch):
    """`l2d_metrics` passes the design's strata by default: without them (design_strata giving None)
    the intervals of SD and rho(Delta, popularity) change and every other metric's stay the same."""
    from discern_stats.stats import l2d
    d = _stratified_plan_trials(n_items=30)
    with pytest.warns(Warning):
        a = l2d.l2d_metrics(d, n_resamples=200, overall=False).set_index("metric")
    monkeypatch.setattr(l2d, "design_strata", lambda df: None)
    with pytest.warns(Warning):
        b = l2d.l2d_metrics(d, n_resamples=200, overall=False).set_index("metric")
    moved = {m for m in a.index if not np.allclose(a.loc[m, ["lo", "hi"]].astype(float),
                                                   b.loc[m, ["lo", "hi"]].astype(float), equal_nan=True)}
    assert moved == {"SD", "rho_pop"}
    pd.testing.assert_series_equal(a["estimate"], b["estimate"])
    assert a["interval"].str.contains("within the design's 6 popularity x reliability strata").all()
    assert not b["interval"].str.contains("within the design").any()  # the table says which term it shows
