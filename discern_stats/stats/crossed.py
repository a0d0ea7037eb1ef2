"""Intervals for Design A's crossed design: items x sources (seed 000; SPEC "Intervals").

Every item draws its own sources and sources recur across items, so two trials are dependent
when they share an item *or* a source. Resampling items only (the old default) misses the
covariance of trials that share a source and under-covers when sources differ in how much they
move respondents (coverage 0.455 for SD at a source-effect SD of 0.7, BENCHMARKS.md).

Method (``crossed``), the two-way cluster variance of Cameron, Gelbach & Miller (2011),
V = V_item + V_source - V_item∩source, with two choices that make it usable here:

- V_item is the variance of the item-cluster bootstrap of the statistic itself (all rows of a
  resampled item move together), as before.
- V_source - V_item∩source is the covariance of trials that share a source but not an item:
  Σ_j Σ_{i≠i'} ψ_ij ψ_i'j over the (item i, source j) cells. It is estimated on data with each
  item's own level removed: items differ a lot in how far their respondents move (|C - P1|
  scales with the truth), and each item's sources span the six strata, so that level cancels
  inside an item; resampling sources or cells without removing it breaks that balance and counts
  the item variance again (Owen's pigeonhole bootstrap, with product weights over items and
  sources, gave SEs 2.6x too wide and 100 % coverage with no source effect). Each cell's item
  level is its item's mean over the item's *other* cells (leave one cell out,
  `remove_item_levels`): subtracting the item's raw mean would also subtract the cell's own
  source effect and shrink the source term (SEs 15-35 % too small at a source-effect SD of 0.7);
  the two-way additive fit (item + source) used until issue 24's fourth pass avoids that but
  couples the cells of one source through the fitted source level, a spurious source term of
  0.24-0.35 x the sum of squared cell sums on pure-noise linear terms, where leaving the cell out
  gives -0.01-0.02 (`benchmarks/crossed_source_term_parts.py --noise`). The term is
  max(0, var_source - var_cell): the variances of the statistic's linear terms summed per source
  and per cell under resampling sources, and cells, with replacement; each statistic below is
  linear in those terms, so both variances are in closed form (`SourceTerm`,
  `resample_variance`: the limit of infinitely many resamples; until issue 24's last pass they
  came from 1,000 resamples of each kind, about 2 % Monte Carlo error in the SE, and the rhos
  re-ranked every resample).
  - Spearman rhos: linear terms too, the derivative of rho with respect to each row's weight
    (`spearman.spearman_influences`, exact in O(n log n)), less their item levels, like a ratio's.
  - Ratio statistics sum(num) / sum(den): the linear terms ψ_r = (num_r - θ den_r) / Σ den less
    their item levels, summed per source and per cell.
  - Pair statistics whose pairs span two sources (the reliability propensity: pairs within one
    item x factor, members in different sources): the Hajek linear terms, every pair at both of
    its members (``members=2``), not adjusted.
  - Pair statistics whose pairs lie within one (item, source) cell (the truth propensity: pairs
    within one item x source) are a plain ratio of cell sums, theta = sum_c N_c / sum_c D_c
    (N_c = sum of h over the cell's pairs, D_c their number), so theta_hat - theta =
    sum_c (N_c - theta D_c) / sum_c D_c exactly: each pair once (``members=1``), linear terms net
    of item levels like any ratio. Both members of a pair are in the same cell, so putting the pair
    at both of them doubles every cell's term (4x the source term: coverage 0.985-0.995 at a
    source-effect SD of 1.5, BENCHMARKS.md, issue 24), and items differ in how often their
    respondents move at all (h = 1/2 at a tie), a level that the cells of one source (all of
    other items) do not share.
- Strata: seed 000's design draws every item's sources within the 6 popularity tertile x
  reliability half strata (`core.vocab.source_tiers`), so each stratum's share of an item's cells
  is fixed, not sampled. Where the data show that draw (`l2d.design_strata` reads the strata from
  the items' sources; `balanced_strata` checks them per group), the rhos of Delta with the two
  attributes that define the strata (SD: reliability, rho(Delta, popularity):
  `l2d.STRATIFIED_RHOS`) take their source term from the raw linear terms (no item levels
  removed), both resampling variances within strata, the small-cluster correction on
  G_source - H (`spearman_source_terms(within_strata=...)`): the strata then keep the within-item
  balance that the item levels are removed for. Unstratified, rho(Delta, popularity) over-covered
  (0.977-0.996 in 7 of 12 cells; its source term 0.80 of the variance where the pool's part is
  0.16, at 132 sources and no source effect). Every other statistic keeps the unstratified term of
  its item-removed linear terms: where the strata are the pool's own tertiles and halves their
  boundaries move with the pool (the mean of the top half of 20 uniform draws varies 2.2x more
  than the within-half variance says), which a within-strata variance misses (TD and the truth
  propensity 0.91-0.93 at 20-60 sources with source effects correlated with reliability or
  popularity). BENCHMARKS.md, issue 24, fourth pass.
  Where the user declares the strata fixed thresholds (``l2d_metrics(fixed_strata=True)``,
  ``metrics l2d --fixed-strata``: the pool drawn within the tiers of the whole source table,
  `designs.l2d.source_pool`), every statistic takes its term within the strata
  (`ratio_source_terms(within_strata=True)`; the rhos from raw linear terms): unstratified, the
  strata's fixed shares counted as pool variance (TD and the truth propensity up to 0.98 under
  such pools; BENCHMARKS.md, issue 24, sixth pass).
- Interval (`crossed_se_interval`): estimate ± t_df · sqrt(V) with the small-cluster correction
  (each component scaled by G / (G - 1), G_source / (G_source - H) with H strata, Student t with
  Satterthwaite degrees of freedom, the source term as the difference var_source - var_cell,
  var_source on (G_source - H) / (1 + r), r its share that is the source term: `source_df`), clipped to the statistic's range; p-value: the two-sided
  test of the distance from the chance value with the same law. Proportions (shares, CD,
  propensities): the Wilson score interval at the clustered effective size, and its score test.

Coverage (benchmarks/coverage_l2d.py; benchmarks/coverage_crossed_sources.py for pools of 20,
60 and 132 sources, BENCHMARKS.md): below `l2d.MIN_SOURCES_SHOWN` sources a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from .spearman import spearman_influences

@dataclass
class CrossedIndex:
    """Item, source and (item, source) cell codes of the rows of one analysis group, and the number of
    source and cell levels over which the source term's resampling variances are taken."""
    item: np.ndarray
    source: np.ndarray
    cell: np.ndarray
    n_items: int
    n_sources: int
    n_cells: int
    source_stratum: np.ndarray | None = None  # stratum code of each source level (None: unstratified)

    @classmethod
    def build(cls, items: pd.Series | np.ndarray, sources: pd.Series | np.ndarray,
              source_levels: pd.Index | None = None, source_strata: pd.Series | None = None) -> "CrossedIndex":
        """Codes for the rows. ``source_levels`` fixes the source coding, so two groups with the same
        levels have their source sums on the same sources (subgroup gaps: the two levels have their
        own items but the same sources, and the gap's source term is that of the difference).
        ``source_strata`` (source label -> stratum): the strata within which the design drew each
        item's sources (`balanced_strata`); kept only where every item's rows meet every stratum's
        sources equally often and each stratum has 2 or more sources here, else unstratified."""
        item, item_levels = pd.factorize(pd.Series(items).to_numpy(), sort=True)
        if source_levels is None:
            source, source_levels = pd.factorize(pd.Series(sources).to_numpy(), sort=True)
        else:
            source = source_levels.get_indexer(pd.Series(sources).to_numpy())
        cell, cell_keys = pd.factorize(item.astype(np.int64) * (len(source_levels) + 1) + source, sort=True)
        ix = cls(item.astype(np.int64), source.astype(np.int64), cell.astype(np.int64), len(item_levels),
                 len(source_levels), len(cell_keys))
        if source_strata is not None:
            ix.source_stratum = balanced_strata(ix, source_strata.reindex(pd.Index(source_levels)).to_numpy())
        return ix

    def subset(self, mask: np.ndarray) -> "CrossedIndex":
        """The same index for a subset of the rows (codes kept; unused items, sources and cells weigh nothing)."""
        return CrossedIndex(self.item[mask], self.source[mask], self.cell[mask], self.n_items, self.n_sources,
                            self.n_cells, self.source_stratum)

    def cell_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """(item code, source code) of each cell (cells without rows here: item 0, source -1)."""
        c_item = np.zeros(self.n_cells, np.int64)
        c_source = np.full(self.n_cells, -1, np.int64)
        c_item[self.cell], c_source[self.cell] = self.item, self.source
        return c_item, c_source


def balanced_strata(ix: CrossedIndex, stratum_of_source: np.ndarray) -> np.ndarray | None:
    """Integer stratum codes of the sources of ``ix`` where the design is stratified: every item has
    the same number of (item, source) cells in every stratum, and every stratum has at least 2 of
    the sources present (a within-stratum variance needs 2). None otherwise (a source without a
    stratum, strata met unevenly: the sources are then taken as a simple random draw)."""
    codes, _ = pd.factorize(pd.Series(stratum_of_source), sort=True)
    if codes.size == 0 or (codes < 0).any():
        return None
    n_h = int(codes.max()) + 1
    if n_h < 2:
        return None
    c_item, c_source = ix.cell_levels()
    used = c_source >= 0
    per_item = np.zeros((ix.n_items, n_h), np.int64)
    np.add.at(per_item, (c_item[used], codes[c_source[used]]), 1)
    per_item = per_item[per_item.sum(axis=1) > 0]
    present = np.bincount(codes[np.unique(ix.source)], minlength=n_h)
    if per_item.size == 0 or (per_item != per_item[:, :1]).any() or present.min() < 2:
        return None
    return codes.astype(np.int64)


def remove_item_levels(values: np.ndarray, item: np.ndarray, source: np.ndarray, weights: np.ndarray | None = None,
                       cell: np.ndarray | None = None) -> np.ndarray:
    """values_r - w_r * alpha_i^(-c): each row less its item's level estimated without the row's own
    (item, source) cell c, alpha_i^(-c) = (A_i - A_c) / (Q_i - Q_c) with the cell sums A_c = sum w v,
    Q_c = sum w^2 and the item's totals A_i, Q_i (the least-squares fit of values ~ w * alpha over
    the item's other cells); 0 for an item with a single cell.

    Leaving the cell out keeps the cell's own source effect in it (an item mean over all its cells
    would take 1/6 of it away) and brings in no other cell of the same source, so cells that share
    a source are not coupled through the removed part (the two-way fit did that: module docstring).
    ``cell``: codes of the rows' cells (derived from item and source when not given)."""
    w = np.ones(len(values)) if weights is None else np.asarray(weights, float)
    if cell is None:
        n_s = int(source.max(initial=-1)) + 1
        cell = pd.factorize(item.astype(np.int64) * (n_s + 1) + source)[0]
    n_i, n_c = int(item.max(initial=-1)) + 1, int(cell.max(initial=-1)) + 1
    c_item = np.zeros(n_c, np.int64)
    c_item[cell] = item
    A = np.bincount(cell, w * values, minlength=n_c)
    Q = np.bincount(cell, w * w, minlength=n_c)
    rest = np.bincount(c_item, Q, minlength=n_i)[c_item] - Q
    has_rest = rest > 1e-12 * (rest + Q)
    alpha = np.zeros(n_c)
    alpha[has_rest] = (np.bincount(c_item, A, minlength=n_i)[c_item] - A)[has_rest] / rest[has_rest]
    return values - w * alpha[cell]


@dataclass
class SourceTerm:
    """The source term of one statistic: its linear terms summed per source (``source_sums``, one
    entry per source level of the index) and the resampling variance of its cell sums (``var_cell``).

    Resampling G clusters with replacement (multinomial counts w, E w_c = 1, var w_c = 1 - 1/G,
    cov = -1/G) moves a linear statistic by sum_c w_c a_c, whose variance is exactly
    ``resample_variance(a)`` = sum_c a_c^2 - (sum_c a_c)^2 / G: the limit of var_source and
    var_cell over infinitely many resamples, in closed form (no Monte Carlo error, no resample
    matrices). V_source - V_item∩source = max(0, var_source - var_cell) (`source_variance`)."""
    source_sums: np.ndarray
    var_cell: float
    source_stratum: np.ndarray | None = None  # stratum code per source (None: one stratum)

    @property
    def var_source(self) -> float:
        return resample_variance(self.source_sums, self.source_stratum)

    @property
    def n_strata(self) -> int:
        """Number of source strata (1: unstratified)."""
        return 1 if self.source_stratum is None else int(self.source_stratum.max()) + 1

    def minus(self, other: "SourceTerm") -> "SourceTerm":
        """The term of (this statistic - ``other``) where both are on the same sources but on cells of
        their own (subgroup gaps: the two levels' items differ): source sums subtract, the cell
        variances add (the cells of the two levels are disjoint); strata where both have the same."""
        same = (self.source_stratum is not None and other.source_stratum is not None
                and np.array_equal(self.source_stratum, other.source_stratum))
        return SourceTerm(self.source_sums - other.source_sums, self.var_cell + other.var_cell,
                          self.source_stratum if same else None)


def resample_variance(sums: np.ndarray, strata: np.ndarray | None = None) -> float:
    """Variance of sum_c w_c a_c under multinomial resampling of the G clusters with equal probability
    (counts summing to G): sum a^2 - (sum a)^2 / G. With ``strata`` (a code per cluster), resampling
    within each stratum (counts summing to its G_h; stratified sampling, Cochran 1977, 5.3):
    sum_h [sum_{c in h} a_c^2 - (sum_{c in h} a_c)^2 / G_h]; strata with no cluster add nothing.
    NaN where any a is not finite."""
    a = np.asarray(sums, float)
    if not a.size:
        return 0.0
    if strata is None:
        return float(a @ a - a.sum() ** 2 / a.size)
    g = np.bincount(strata, minlength=int(strata.max()) + 1)
    tot = np.bincount(strata, a, minlength=g.size)
    return float(a @ a - np.sum(tot[g > 0] ** 2 / g[g > 0]))


def linear_source_terms(psi: list[np.ndarray], ix: CrossedIndex, within_strata: bool = False) -> list[SourceTerm]:
    """The `SourceTerm` of each per-row linear term vector: summed per source (kept) and per cell
    (its resampling variance); with ``within_strata`` and strata in ``ix``, both variances within
    the source strata (a cell in its source's stratum), else unstratified."""
    strata = ix.source_stratum if within_strata else None
    cell_stratum = None
    if strata is not None:  # each cell in its source's stratum (cells without rows weigh nothing)
        cell_stratum = strata[np.maximum(ix.cell_levels()[1], 0)]
    out = []
    for p in psi:
        by_cell = np.bincount(ix.cell, p, minlength=ix.n_cells)
        out.append(SourceTerm(np.bincount(ix.source, p, minlength=ix.n_sources),
                              resample_variance(by_cell, cell_stratum), strata))
    return out


def ratio_linear_terms(num: np.ndarray, den: np.ndarray, ix: CrossedIndex, members: int = 1) -> np.ndarray:
    """Per-row linear terms of the ratio sum(num) / sum(den), d theta / d w_r = members * (num_r - theta den_r) / sum(den),
    less their item levels (``members=1``).

    ``members=2`` for a pair statistic theta = (1/P) sum_pairs h whose rows carry every pair at
    both of its members (so sum(den) = 2P): the linear term of row r is sum_{pairs at r} (h - theta) / P
    (Hajek projection: a change at one member changes each of its pairs). The terms are not adjusted
    for item levels (the reliability propensity: pairs within one item x factor across sources). A
    pair statistic whose pairs lie within one (item, source) cell is a plain ratio of cell sums:
    ``members=1`` with each pair once (module docstring).
    """
    total = den.sum()
    theta = num.sum() / total
    psi = members * (num - theta * den) / total
    if members == 1:
        psi = remove_item_levels(psi, ix.item, ix.source, den / total, cell=ix.cell)
    return psi


def ratio_source_terms(nums: list[np.ndarray], dens: list[np.ndarray], ix: CrossedIndex,
                       members: list[int], within_strata: bool = False) -> list[SourceTerm]:
    """The `SourceTerm` of each ratio sum(num_k) / sum(den_k) (`ratio_linear_terms`), unstratified
    (``within_strata``: within the source strata of ``ix``, where it has them; fixed strata)."""
    return linear_source_terms([ratio_linear_terms(np.asarray(n, float), np.asarray(d, float), ix, k)
                                for n, d, k in zip(nums, dens, members)], ix, within_strata=within_strata)


def spearman_linear_terms(x: np.ndarray, ys: list[np.ndarray], ix: CrossedIndex,
                          raw: tuple[int, ...] = ()) -> list[np.ndarray]:
    """Per-row linear terms of rho(x, y_k): d rho / d w_r (`spearman.spearman_influences`), less
    their item levels (`remove_item_levels`) as for a ratio, except at the positions k in ``raw``."""
    _, psis = spearman_influences(x, ys)
    return [p if k in raw or not np.all(np.isfinite(p)) else remove_item_levels(p, ix.item, ix.source, cell=ix.cell)
            for k, p in enumerate(psis)]


def spearman_source_terms(x: np.ndarray, ys: list[np.ndarray], ix: CrossedIndex,
                          pair: tuple[int, int] | None = None, within_strata: tuple[int, ...] = ()
                          ) -> list[SourceTerm]:
    """The `SourceTerm` of rho(x, y_k) for each k, and with ``pair=(i, j)`` a last one for
    rho(y_i, y_j), from the rhos' linear terms.

    Positions k in ``within_strata``, where ``ix`` has source strata: the raw linear terms
    (d rho / d w_r, no item levels removed), both variances within the strata (module docstring,
    "Strata": the rhos of Delta with a source attribute that defines the strata, SD and
    rho(Delta, popularity)). Every other rho: the linear terms less their item levels,
    unstratified.

    The linear terms replace re-ranking 1,000 source and 1,000 cell resamples of each rho (the
    previous form: the rho of x's mid-ranks less their item levels, rescaled), which was a third of
    the crossed suite's time; the ratios' source terms were linear already."""
    raw = tuple(k for k in within_strata if k < len(ys)) if ix.source_stratum is not None else ()
    psi = spearman_linear_terms(x, ys, ix, raw)
    if pair is not None:
        psi += spearman_linear_terms(ys[pair[0]], [ys[pair[1]]], ix)
    return [linear_source_terms([p], ix, within_strata=k in raw)[0] for k, p in enumerate(psi)]


def source_variance(term: SourceTerm) -> float:
    """The source term V_source - V_item∩source = max(0, var_source - var_cell) (0 where not finite)."""
    v = term.var_source - term.var_cell
    return max(0.0, v) if np.isfinite(v) else 0.0


SOURCE_DF_SHARE = 1 / 2  # where the source effects dominate: var_source on (G_source - H) / 2 (small_cluster_df)


def source_df(n_sources: int, source_strata: int, net_share: float) -> float:
    """Degrees of freedom of var_source: (G_source - H) / (1 + r), r = ``net_share`` clipped to [0, 1]
    (the share of var_source that is the source term, (var_source - var_cell) / var_source).

    - r = 0 (the source sums are cell noise, no source effect): G_source - H, the degrees of freedom
      of a within-stratum variance of G_source independent sums (Cochran 1977, 5.3); the source term
      var_source - var_cell then has nearly the variance of var_source itself (each source's cells
      are many, so sum_j S_j^2 - sum_c C_c^2 loses only the cells' own squares).
    - r = 1 (the source effects dominate): (G_source - H) / 2 (`SOURCE_DF_SHARE`), the measured
      coefficient of variation of the source term at 20 sources (0.36-0.60 over data sets: 6-15
      degrees of freedom against 19; the sources' linear terms differ in scale).
    1 / df is linear in r between the two. The rule before issue 24's sixth pass took (G_source - H) / 2
    at every r: at 20 sources and no source effect the rhos' median df was 3 and SD, rho_pop and the
    propensities covered 0.975-0.989 (BENCHMARKS.md, issue 24, sixth pass). At least 1."""
    r = min(max(float(net_share), 0.0), 1.0) if np.isfinite(net_share) else 1.0
    return max((n_sources - source_strata) / (1.0 + r * (1.0 / SOURCE_DF_SHARE - 1.0)), 1.0)


def small_cluster_df(v_item: float, v_source: float, n_items: int, n_sources: int,
                     v_source_resample: float | None = None, source_strata: int = 1) -> float:
    """Satterthwaite degrees of freedom of V = V_item + V_source, V_source = var_source - var_cell
    (Satterthwaite 1946, as for an ANOVA variance component formed from two mean squares):

        df = V^2 / (V_item^2 / df_item + var_source^2 / df_source),

    df_item = G_item - 1, df_source = `source_df` (G_source - H) / (1 + r), r = V_source / var_source
    (H = ``source_strata``, 1 unless the sources were drawn within strata: a within-stratum variance
    loses one degree of freedom per stratum), ``v_source_resample`` = var_source on the scale of
    ``v_source``; var_cell, a variance over the (item, source) cells (about 6x as many as items), is
    taken as known (at equal variances its term would be (G_source - 1) / (2 (cells - 1)) of the
    source resamples': 2-11 % for 20-132 sources and 600 cells). The source term is a difference:
    where sources barely differ it is a small difference of two large variances and as uncertain as
    var_source itself, not a chi-square of its own size (the rule before issue 24's second pass,
    V_source^2 / ((G_source - 1) / 3), gave the reliability propensity at 20 sources and no source
    effect a median df of 71 and coverage 0.909 over 1,000 data sets, BENCHMARKS.md, issue 24).
    Without ``v_source_resample`` var_source is taken as ``v_source`` (var_cell = 0, r = 1). At least 1."""
    gross = v_source if v_source_resample is None else max(float(v_source_resample), float(v_source))
    df_source = source_df(n_sources, source_strata, v_source / gross if gross > 0 else 1.0)
    num = (v_item + v_source) ** 2
    den = v_item ** 2 / max(n_items - 1, 1) + gross ** 2 / df_source
    return float(max(num / den, 1.0)) if den > 0 else float(max(min(n_items - 1, df_source), 1))


def wilson(p: float, n_eff: float, q: float) -> tuple[float, float]:
    """Wilson score interval of a proportion p with (effective) size n_eff and quantile q."""
    q2n = q * q / n_eff
    centre = (p + q2n / 2) / (1 + q2n)
    half = q / (1 + q2n) * np.sqrt(p * (1 - p) / n_eff + q2n / (4 * n_eff))
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if p <= 0 else lo), (1.0 if p >= 1 else hi)  # exact at the bounds (no rounding below 1)


def crossed_se_interval(estimate: float, v_item: float, v_source: float, *, level: float, chance: float | None,
                        bounds: tuple[float, float], n_items: int | None = None, n_sources: int | None = None,
                        proportion: tuple[int, int] | None = None, p_floor: float = 0.0,
                        v_source_resample: float | None = None, source_strata: int = 1) -> dict:
    """lo, hi, p_value, se (and df) from the two variance components (and ``v_source_resample``,
    var_source, whose difference with var_cell is ``v_source``: the degrees of freedom).

    - Small-cluster correction (``n_items`` and ``n_sources`` given): each bootstrap variance of a
      sum over G clusters has expectation (G - 1) / G of the variance, so V_item and V_source are
      scaled by G / (G - 1) (the CR1 factor of each factor); the quantile is Student t with the
      Satterthwaite degrees of freedom of `small_cluster_df` (var_source on `source_df`,
      (G_source - H) / (1 + r) degrees of freedom), and so is the test. Sources drawn within H
      strata (``source_strata``): the source term is a within-stratum variance, scaled by
      G / (G - H) (n_h / (n_h - 1) at equal strata). Without them:
      normal z, the variances as estimated.
    - ``proportion=(n, clusters)`` (a share, CD, a propensity: a statistic in [0, 1]): the Wilson
      score interval with the clustered effective size n_eff = p (1 - p) / se^2 (at most n;
      Korn & Graubard 1998), so it stays inside [0, 1] with honest width near the bounds. At p = 0
      or 1 (or se = 0) the data hold no information on the clustering, and n_eff is the number of
      clusters (items) that contribute (``clusters``), as if every item's trials were one trial:
      e.g. 0 of 1,401 posteriors in 60 items gives [0, 0.060]. The p-value is the score test
      against ``chance`` with the same n_eff and quantile law, so the interval excludes chance
      exactly when p < 1 - level.
    - No variation at all (se = 0, not a proportion): p = 1 at the chance value, else ``p_floor``
      (the resolution of the resamples, 1 / (B + 1)), never NaN.
    """
    if not (np.isfinite(estimate) and np.isfinite(v_item)):
        return {"lo": np.nan, "hi": np.nan, "p_value": np.nan, "se": np.nan, "df": np.nan}
    df = np.inf
    if n_items is not None and n_sources is not None and n_items > 1 and n_sources > source_strata:
        v_item = v_item * n_items / (n_items - 1)
        scale = n_sources / (n_sources - source_strata)
        v_source = v_source * scale
        gross = None if v_source_resample is None else v_source_resample * scale
        df = small_cluster_df(v_item, v_source, n_items, n_sources, gross, source_strata)
    se = float(np.sqrt(v_item + v_source))
    law = sps.norm if not np.isfinite(df) else sps.t(df)
    if proportion is not None:
        return {**_score_interval(estimate, se, proportion, law, level, chance), "se": se, "df": df}
    q = float(law.ppf(0.5 + level / 2))
    lo, hi = max(bounds[0], estimate - q * se), min(bounds[1], estimate + q * se)
    p = np.nan
    if chance is not None:
        p = float(2 * law.sf(abs(estimate - chance) / se)) if se > 0 else (1.0 if estimate == chance else p_floor)
    return {"lo": float(lo), "hi": float(hi), "p_value": p, "se": se, "df": df}


def _score_interval(estimate: float, se: float, proportion: tuple[int, int], law, level: float,  # noqa: ANN001
                    chance: float | None) -> dict:
    """Wilson interval and score-test p-value of a proportion at the clustered effective size
    (see `crossed_se_interval`); ``law`` gives the quantile and tail (normal or Student t)."""
    n, clusters = proportion
    inside = 0 < estimate < 1 and se > 0
    n_eff = max(min(float(n), estimate * (1 - estimate) / se ** 2) if inside else float(min(n, clusters)), 1.0)
    lo, hi = wilson(estimate, n_eff, float(law.ppf(0.5 + level / 2)))
    p = np.nan if chance is None else float(2 * law.sf(abs(estimate - chance) / np.sqrt(chance * (1 - chance) / n_eff)))
    return {"lo": float(lo), "hi": float(hi), "p_value": p, "n_eff": n_eff}


def crossed_interval(estimate: float, boot_item: np.ndarray, term: SourceTerm, *,
                     level: float, chance: float | None, bounds: tuple[float, float], n_items: int | None = None,
                     n_sources: int | None = None, proportion: tuple[int, int] | None = None) -> dict:
    """lo, hi, p_value and se from V = var(item bootstrap) + max(0, var_source - var_cell) of the
    statistic's `SourceTerm` (`crossed_se_interval`)."""
    b = boot_item[np.isfinite(boot_item)]
    if b.size < 2 or not np.isfinite(estimate):
        return {"lo": np.nan, "hi": np.nan, "p_value": np.nan, "se": np.nan}
    vs = term.var_source
    return crossed_se_interval(estimate, float(b.var(ddof=1)), source_variance(term), level=level,
                               chance=chance, bounds=bounds, n_items=n_items, n_sources=n_sources,
                               proportion=proportion, p_floor=1.0 / (b.size + 1),
                               v_source_resample=vs if np.isfinite(vs) else None, source_strata=term.n_strata)
