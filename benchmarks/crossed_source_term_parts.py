"""What the crossed source term estimates, by variant (issue 24, fourth pass; BENCHMARKS.md).

Two checks, both on the data generator of ``coverage_crossed_sources.py`` (not the package's
simulator):

``--noise``: linear terms that are pure noise (no item, no source effect) on the crossed layout
(100 items x one source per stratum x 5 factors): the source term var_source - var_cell, which
should be about 0, as a share of the sum of squared cell sums, for the linear terms as they are
(raw), less their item levels from the two-way fit (the package's until issue 24's fourth pass),
and less leave-one-cell-out item levels (`crossed.remove_item_levels`, the package's now).

``--nested``: pools x item draws for one pool size and source-effect setting: the true split of each
metric's Monte Carlo variance into its item part (mean within-pool variance) and pool part
(variance of the pool means less its within-pool share) beside the package's estimates, the
item-bootstrap variance and the source term (small-cluster scaled), for each source-term variant
(``--variants``: removal none / twoway / loo, x strata 0 / 1, applied to every metric; "package" =
the package as it is).

    python benchmarks/crossed_source_term_parts.py --noise
    python benchmarks/crossed_source_term_parts.py --nested --pool 132 --setting 0 --pools 60 --draws 15 \\
        --pool-draw design --variants package,none:1,twoway:0,loo:0
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

import coverage_crossed_sources as ccs
from discern_stats.stats import l2d
from discern_stats.stats.crossed import CrossedIndex, linear_source_terms, remove_item_levels
from discern_stats.stats.spearman import spearman_influences


def two_way_item_levels(values: np.ndarray, ix: CrossedIndex, weights: np.ndarray | None = None,
                        sweeps: int = 100) -> np.ndarray:
    """values - w * alpha_item from the two-way fit values ~ w (alpha_item + beta_source) (weighted least
    squares by alternating projections over the cell sums): the package's item levels until issue 24's
    fourth pass (commit d9e8440), kept here for comparison."""
    w = np.ones(len(values)) if weights is None else np.asarray(weights, float)
    A = np.bincount(ix.cell, w * values, minlength=ix.n_cells)
    Q = np.bincount(ix.cell, w * w, minlength=ix.n_cells)
    c_item, c_source = ix.cell_levels()
    c_source = np.maximum(c_source, 0)
    wi = np.bincount(c_item, Q, minlength=ix.n_items)
    ws = np.bincount(c_source, Q, minlength=ix.n_sources)
    alpha, beta = np.zeros(ix.n_items), np.zeros(ix.n_sources)
    for _ in range(sweeps):
        alpha = np.bincount(c_item, A - Q * beta[c_source], minlength=ix.n_items) / np.where(wi > 0, wi, 1)
        beta = np.bincount(c_source, A - Q * alpha[c_item], minlength=ix.n_sources) / np.where(ws > 0, ws, 1)
    w_item = np.bincount(ix.item, w, minlength=ix.n_items)
    alpha -= (w_item @ alpha) / w_item.sum()
    return values - w * alpha[ix.item]


def _remove(p: np.ndarray, ix: CrossedIndex, removal: str, w: np.ndarray | None = None) -> np.ndarray:
    if removal == "none" or not np.all(np.isfinite(p)):
        return p
    if removal == "twoway":
        return two_way_item_levels(p, ix, w)
    return remove_item_levels(p, ix.item, ix.source, w, cell=ix.cell)  # leave one cell out


@contextlib.contextmanager
def variant(name: str):
    """Every metric's source term by one variant "removal:strata" (the package's own for "package")."""
    if name == "package":
        yield
        return
    removal, strata = name.split(":")
    within = strata == "1"

    def rho_terms(x, ys, ix, pair=None, within_strata=()):  # noqa: ANN001, ANN202
        _, psis = spearman_influences(x, ys)
        psis = [_remove(p, ix, removal) for p in psis]
        if pair is not None:
            psis.append(_remove(spearman_influences(ys[pair[0]], [ys[pair[1]]])[1][0], ix, removal))
        return linear_source_terms(psis, ix, within_strata=within)

    def ratio_terms(nums, dens, ix, members):  # noqa: ANN001, ANN202
        out = []
        for n, d, k in zip(nums, dens, members):
            n, d = np.asarray(n, float), np.asarray(d, float)
            psi = k * (n - n.sum() / d.sum() * d) / d.sum()
            out.append(_remove(psi, ix, removal, d / d.sum()) if k == 1 else psi)
        return linear_source_terms(out, ix, within_strata=within)

    saved = l2d.spearman_source_terms, l2d.ratio_source_terms
    l2d.spearman_source_terms, l2d.ratio_source_terms = rho_terms, ratio_terms
    try:
        yield
    finally:
        l2d.spearman_source_terms, l2d.ratio_source_terms = saved


def noise(reps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print("| sources | two-way item levels | leave-one-out item levels | raw |\n|---|---|---|---|")
    for G in (20, 60, 132):
        out = []
        for _ in range(reps):
            stratum = np.arange(G) % 6
            src = np.column_stack([rng.choice(np.flatnonzero(stratum == h), 100) for h in range(6)])
            ix = CrossedIndex.build(np.repeat(np.arange(100), 30), np.repeat(src.ravel(), 5))
            psi = rng.normal(size=ix.item.size)
            psi -= psi.mean()
            base = (np.bincount(ix.cell, psi) ** 2).sum()
            row = []
            for removal in ("twoway", "loo", "none"):
                (t,) = linear_source_terms([_remove(psi, ix, removal)], ix)
                row.append((t.var_source - t.var_cell) / base)
            out.append(row)
        m = np.mean(out, axis=0)
        print(f"| {G} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:.3f} |")


def nested(args: argparse.Namespace) -> None:
    sd, corr = ccs.SETTINGS[args.setting]
    G = args.pool
    print(f"pool {G}, setting {args.setting}, {args.pools} pools x {args.draws} item draws, {args.pool_draw} pools; "
          "shares of the Monte Carlo variance")
    print("| variant | metric | true item part | est. item part | true pool part | est. source term |")
    print("|---|---|---|---|---|---|")
    for name in args.variants.split(","):
        rng = np.random.default_rng([args.seed, G, args.pools])  # the same data sets for every variant
        shape = (args.pools, args.draws, len(ccs.METRICS))
        est, vi, vs = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        t0 = time.time()
        with variant(name):
            for p in range(args.pools):
                pool = ccs.make_pool(rng, G, sd, corr, args.pool_draw)
                for d in range(args.draws):
                    comp = ccs.components(ccs.make_trials(rng, 100, pool), args.resamples, d)
                    for k, m in enumerate(ccs.METRICS):
                        e, v_item, v_src, n_i, n_s = comp[m][:5]
                        h = comp[m][8]
                        est[p, d, k], vi[p, d, k], vs[p, d, k] = e, v_item * n_i / (n_i - 1), v_src * n_s / (n_s - h)
        tot = est.reshape(-1, len(ccs.METRICS)).var(axis=0, ddof=1)
        within = est.var(axis=1, ddof=1).mean(axis=0)
        pool_part = est.mean(axis=1).var(axis=0, ddof=1) - within / args.draws
        for k, m in enumerate(ccs.METRICS):
            print(f"| {name} | {m} | {within[k] / tot[k]:.2f} | {vi[..., k].mean() / tot[k]:.2f} | "
                  f"{pool_part[k] / tot[k]:.2f} | {vs[..., k].mean() / tot[k]:.2f} |")
        print(f"({name}: {time.time() - t0:.0f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--noise", action="store_true")
    ap.add_argument("--nested", action="store_true")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--pool", type=int, default=132)
    ap.add_argument("--setting", default="0", choices=list(ccs.SETTINGS))
    ap.add_argument("--pools", type=int, default=60)
    ap.add_argument("--draws", type=int, default=15)
    ap.add_argument("--resamples", type=int, default=300)
    ap.add_argument("--pool-draw", default="design", choices=("quantile", "design"))
    ap.add_argument("--variants", default="package,none:1,twoway:0,loo:0")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.noise:
        noise(args.reps, args.seed)
    if args.nested:
        nested(args)
    if not (args.noise or args.nested):
        ap.error("choose --noise and/or --nested")


if __name__ == "__main__":
    main()
