"""Publication figures (matplotlib / ArviZ) for the report pages; each returns a Figure."""

from __future__ import annotations

import functools
import sys

import matplotlib

if "ipykernel" not in sys.modules:  # in a kernel, keep the inline backend so figures display
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..core.vocab import (CONTRAST_ENDPOINT_LABELS, CUE_LABELS, CUE_METRIC_LABELS, DISCERNMENT_PARTS,  # noqa: E402
                          DISCERNMENT_TERMS, INTERVENTION_NAMES, INTERVENTIONS, MEAN_OVER_GROUPS, MODEL_PARAMETER_LABELS,
                          OUTCOMES, POPULATION_MEAN, STRATEGIES, STRATEGY_LABELS, STRATUM_LABELS)
from .context import ReportContext  # noqa: E402
from .tables import CUE_EFFECTS, _llm_label, fictional_sources, fit_flag, needs  # noqa: E402

# one colour-blind-safe palette (Okabe & Ito 2008) for every figure. LLMs take theirs by their place among
# the database's LLMs (sorted), the same in every figure; other series (metrics, outcomes, chains) take it in order
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
COLORS = OKABE_ITO
# outcome categories: the good ones blue, the neutral grey, the bad ones orange / vermillion
OUTCOME_COLORS = {"Correct Hold": "#0072B2", "Appropriate Update": "#56B4E9", "Stubborn": "#999999",
                  "Inappropriate Update": "#E69F00", "Sycophantic Cave": "#D55E00"}


def llm_colors(ctx: ReportContext) -> dict[str, str]:
    """Each LLM of the database (by name) -> its colour, the same in every figure."""
    names = sorted(ctx.llm_table()["name"])
    return {n: OKABE_ITO[i % len(OKABE_ITO)] for i, n in enumerate(names)}


def _closed(fn):
    """Close the figure before returning it: it is displayed once, as the cell's value."""
    @functools.wraps(fn)
    def wrapper(*a, **k):
        fig = fn(*a, **k)
        if fig is not None:  # None: the design has no trials (the page says so once)
            plt.close(fig)
        return fig
    return wrapper


def _empty(msg: str):
    fig, ax = plt.subplots(figsize=(6, 1.2))
    ax.text(0.5, 0.5, msg, ha="center", va="center")
    ax.axis("off")
    return fig


def _flag(fig, ctx: ReportContext, kind: str) -> None:
    """Put a fit's convergence warning on the figure that shows its numbers."""
    flag = fit_flag(ctx, kind)
    if flag:  # above the panels' own titles: lay the panels out again below it
        fig.suptitle(flag, color="#b00020", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_size_inches()[1]))


def _source_flag(fig, ctx: ReportContext) -> None:
    """Say on a Design A figure that its sources are fictional, when they are."""
    if fictional_sources(ctx):
        fig.text(0.01, 0.005, "FICTIONAL SOURCES: invented demo domains (*.example); reliability and popularity are "
                 "made up", color="#b00020", fontsize=8, ha="left", va="bottom")


def _cue_slice(ctx: ReportContext, intervention: str, stratum: str, metrics: list[str] | None = None):
    """Design B metric rows of one intervention and stratum set (None when there are none)."""
    m = ctx.metrics("cue")
    if m.empty:
        return None
    m = m[(m.intervention == intervention) & (m.stratum == stratum)]
    return m[m.metric.isin(metrics)] if metrics is not None else m


@_closed
@needs("l2d")
def outcome_shares(ctx: ReportContext):
    """Stacked bars of the five outcome shares per LLM (all strategies)."""
    m = ctx.metrics("l2d")
    if m.empty:
        return _empty("no Design A trials")
    m = m[(m.strategy == "(all)") & m.metric.str.startswith("share: ")]
    w = m.assign(outcome=m.metric.str.removeprefix("share: ")).pivot(index="llm", columns="outcome", values="estimate")[OUTCOMES]
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(w) + 1.6))
    left = np.zeros(len(w))
    for o in OUTCOMES:
        ax.barh([lab.get(i, i) for i in w.index], 100 * w[o], left=left, color=OUTCOME_COLORS[o], label=o)
        left += 100 * w[o].to_numpy()
    ax.set_xlabel("share of valid posteriors whose claim conflicts with the prior, C ≠ P1 (%)")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()  # LLMs top to bottom in name order, as in the tables
    # the legend to the right of the bars: it never covers the bars or the axis label
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    _source_flag(fig, ctx)
    return fig


def _group_label(group: str, lab: dict[str, str]) -> str:
    """'sim-credulous / CoT' -> 'sim-credulous (simulator) / Chain of thought' (labels from core.vocab)."""
    parts = group.split(" / ")
    return " / ".join(STRATEGY_LABELS.get(p, lab.get(p, p)) for p in parts)


@_closed
@needs("l2d")
def popularity_vs_reliability(ctx: ReportContext):
    """Top: ρ(Δ, reliability) and ρ(Δ, popularity) per LLM with 95% intervals. Bottom: the discernment
    model's posterior of the popularity − reliability slope difference per LLM × strategy group (or,
    without a saved model, a line saying why)."""
    m = ctx.metrics("l2d")
    m = m[(m.strategy == "(all)") & m.metric.isin(["SD", "rho_pop"])]
    lab = _llm_label(ctx)
    llms = sorted(m.llm.unique())
    model = ctx.model("discernment")
    s = None
    if model is not None:
        s = ctx.summary("discernment")
        s = s[(s.term == "popularity - reliability") & (s.group != POPULATION_MEAN)]
    n_groups = 1 if s is None else s.group.nunique()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 0.45 * len(llms) + 0.3 * n_groups + 2.6),
                                  height_ratios=[len(llms) + 1.2, max(n_groups, 1.5) * 0.66 + 1.0])
    for j, (metric, name, c) in enumerate((("SD", "reliability (SD)", OKABE_ITO[0]),
                                           ("rho_pop", "popularity", OKABE_ITO[5]))):
        d = m[m.metric == metric].set_index("llm").reindex(llms)
        y = np.arange(len(llms)) + (j - 0.5) * 0.25
        ax.errorbar(d.estimate, y, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", color=c, label=name, capsize=3)
    ax.axvline(0, color="grey", lw=0.8, ls="--")
    ax.set_yticks(np.arange(len(llms)), [lab.get(i, i) for i in llms])
    ax.set_xlabel("Spearman ρ of the update Δ with the source's reliability and popularity (95% CI)")
    ax.invert_yaxis()
    ax.set_title("Update vs reliability and popularity, all strategies pooled", fontsize=10, loc="left")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    if s is None:
        ax2.text(0.5, 0.5, f"discernment model not available ({ctx.model_error('discernment')})", ha="center",
                 va="center", fontsize=9, wrap=True)
        ax2.axis("off")
    else:
        order = {k: i for i, k in enumerate(STRATEGIES)}  # LLM, then strategy in the paper's order
        groups = sorted((g for g in dict.fromkeys(s.group) if g != MEAN_OVER_GROUPS),
                        key=lambda g: (g.split(" / ")[0], order.get(g.split(" / ")[-1], len(order)), g))
        groups.append(MEAN_OVER_GROUPS)  # the groups' average; the population mean mu is in the summary table
        for j, (part, c, name) in enumerate((("move", OKABE_ITO[2], "P(move)"),
                                             ("fraction", OKABE_ITO[3], "fraction moved (partial moves)"))):
            d = s[s.part == part].set_index("group").reindex(groups)
            y = np.arange(len(groups)) + (j - 0.5) * 0.25
            ax2.errorbar(d["mean"], y, xerr=[d["mean"] - d.hdi_lo, d.hdi_hi - d["mean"]], fmt="s", color=c,
                         label=name, capsize=3)
        ax2.set_yticks(np.arange(len(groups)), [_group_label(g, lab) if g != MEAN_OVER_GROUPS else
                                                "mean over groups" for g in groups], fontsize=8)
        ax2.invert_yaxis()
        ax2.set_xlabel("popularity − reliability slope (logit per SD; 94% HDI; > 0: popularity outweighs reliability)")
        ax2.set_title("Discernment model, per LLM × strategy", fontsize=10, loc="left")
        ax2.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        ax2.axvline(0, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    _flag(fig, ctx, "discernment")
    _source_flag(fig, ctx)
    return fig


@_closed
@needs("cue")
def cue_heatmap(ctx: ReportContext, intervention: str = "C0", stratum: str = "core"):
    """Heat map of cue effects (pp) per LLM."""
    m = _cue_slice(ctx, intervention, stratum, CUE_EFFECTS)
    if m is None:
        return _empty("no Design B trials")
    w = m.pivot(index="llm", columns="metric", values="estimate")[[c for c in CUE_EFFECTS if c in set(m.metric)]]
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(1.0 * w.shape[1] + 2.5, 0.6 * len(w) + 1.5))
    im = ax.imshow(w.to_numpy(), cmap="RdBu_r", vmin=-100, vmax=100, aspect="auto")
    ax.set_xticks(range(w.shape[1]), [CUE_METRIC_LABELS.get(c, c) for c in w.columns], rotation=35, ha="right")
    ax.set_yticks(range(len(w)), [lab.get(i, i) for i in w.index])
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            v = w.iat[i, j]
            ax.text(j, i, "" if pd.isna(v) else f"{v:.0f}", ha="center", va="center", fontsize=8,
                    color="white" if abs(v) > 55 else "black")
    fig.colorbar(im, ax=ax, label="effect on P(choose B), pp")
    fig.tight_layout()
    return fig


@_closed
@needs("cue")
def identification_vs_influence(ctx: ReportContext, stratum: str = "core"):
    """Recognition of the better source (%) vs the history-swap effect (pp), per LLM."""
    m = _cue_slice(ctx, "C0", stratum)
    if m is None:
        return _empty("no Design B trials")
    rec = m[m.metric == "recognition"].set_index("llm")
    sw = m[m.metric == "swap"].set_index("llm")
    llms = sorted(set(rec.index) & set(sw.index))
    lab = _llm_label(ctx)
    col = llm_colors(ctx)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for llm in llms:
        r, s = rec.loc[llm], sw.loc[llm]
        ax.errorbar(r.estimate, s.estimate, xerr=[[r.estimate - r.lo], [r.hi - r.estimate]],
                    yerr=[[s.estimate - s.lo], [s.hi - s.estimate]], fmt="o", capsize=3, color=col[llm],
                    label=lab.get(llm, llm))
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("relative-reliability recognition (%; HL/LH mean)")
    ax.set_ylabel("history-swap effect (pp)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@_closed
@needs("cue")
def effect_forest(ctx: ReportContext, stratum: str = "core", intervention: str = "C0"):
    """Forest plot of every cue effect with 95% intervals, one panel per LLM."""
    m = _cue_slice(ctx, intervention, stratum, CUE_EFFECTS)
    if m is None:
        return _empty("no Design B trials")
    llms = sorted(m.llm.unique())
    lab = _llm_label(ctx)
    fig, axes = plt.subplots(1, len(llms), figsize=(max(3.2 * len(llms), 9), 4), sharey=True, sharex=True,
                             squeeze=False)
    for ax, llm in zip(axes[0], llms):
        d = m[m.llm == llm].set_index("metric").reindex(CUE_EFFECTS).dropna(subset=["estimate"])
        y = np.arange(len(d))
        ax.errorbar(d.estimate, y, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", capsize=3,
                    color=llm_colors(ctx)[llm])
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, [CUE_METRIC_LABELS.get(c, c) for c in d.index])
        ax.set_title(lab.get(llm, llm), fontsize=9)
        ax.set_xlabel("pp (95% CI)")
    axes[0, 0].invert_yaxis()  # the first effect on top (the panels share y: invert once)
    fig.tight_layout()
    return fig


@_closed
@needs("cue")
def weights_recovery(ctx: ReportContext):
    """Recovered logit weights (94% HDI) against the simulators' true weights."""
    from .tables import weights_frame
    s = weights_frame(ctx)
    if s.empty:
        return _empty("no saved cue-weight fit")
    s = s[s.intervention == s.intervention.iloc[0]]
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(6, 5))
    col = llm_colors(ctx)
    for llm, d in s.groupby("llm"):
        ax.errorbar(d["true logit (simulator)"], d.logit_mean, yerr=[d.logit_mean - d.logit_hdi_lo,
                    d.logit_hdi_hi - d.logit_mean], fmt="o", capsize=3, color=col[llm], label=lab.get(llm, llm))
    lim = [min(s.logit_hdi_lo.min(), s["true logit (simulator)"].min()) - 0.3,
           max(s.logit_hdi_hi.max(), s["true logit (simulator)"].max()) + 0.3]
    ax.plot(lim, lim, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("true weight (simulator profile, logit)")
    ax.set_ylabel("posterior mean and 94% HDI (logit)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _flag(fig, ctx, "cue")
    return fig


@_closed
@needs("cue")
def contrast_forest(ctx: ReportContext):
    """Intervention contrasts: bootstrap 95% CI (circles) beside the posterior 94% HDI (squares)."""
    from .tables import _contrast_label, contrasts_frame, holm_stars
    c = contrasts_frame(ctx)
    if c.empty:
        return _empty(ctx.contrasts_note())
    c = c[c.scope == "all"]
    lab = _llm_label(ctx)
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(c) / 2 + 2.2), sharey=True)
    for ax, ep in zip(axes, ("swap", "abs_text_order")):
        d = c[c.endpoint == ep].reset_index(drop=True)
        labels = [f"{lab.get(r.llm, r.llm)}: {_contrast_label(r.contrast)}" for r in d.itertuples()]
        y = np.arange(len(d))
        ax.errorbar(d.estimate, y - 0.12, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", capsize=2,
                    color=COLORS[0], label="bootstrap 95% CI")
        if "posterior_mean" in d:
            ax.errorbar(d.posterior_mean, y + 0.12, xerr=[d.posterior_mean - d.hdi_lo, d.hdi_hi - d.posterior_mean],
                        fmt="s", capsize=2, color=COLORS[2], label="posterior 94% HDI")
        for yy, p in zip(y, d.p_holm):
            if holm_stars(p):
                ax.text(ax.get_xlim()[1], yy, " " + holm_stars(p), va="center")
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_title(CONTRAST_ENDPOINT_LABELS[ep] + ", All worlds", fontsize=10)
        ax.set_xlabel("difference (pp)")
    axes[0].invert_yaxis()  # first LLM on top (the axes share y: invert once)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    _flag(fig, ctx, "intervention")
    return fig


@_closed
@needs("cue")
def intervention_profile(ctx: ReportContext, stratum: str = "all",
                         effects: tuple[str, ...] = ("swap", "text_order", "event_time", "Q", "I")):
    """seed 001 Fig. 5: each LLM's cue effects across C0-C4 (95% whole-world bootstrap intervals)."""
    m = ctx.metrics("cue")
    if m.empty:
        return _empty("no Design B trials")
    m = m[(m.stratum == stratum) & m.metric.isin(effects)]
    ivs = [iv for iv in INTERVENTIONS if iv in set(m.intervention)]
    llms = sorted(m.llm.unique())
    lab = _llm_label(ctx)
    fig, axes = plt.subplots(1, len(llms), figsize=(3.6 * len(llms) + 0.5, 3.8), sharey=True, squeeze=False)
    x = np.arange(len(ivs))
    for ax, llm in zip(axes[0], llms):
        for j, (eff, c) in enumerate(zip(effects, COLORS)):
            d = m[(m.llm == llm) & (m.metric == eff)].set_index("intervention").reindex(ivs)
            off = (j - (len(effects) - 1) / 2) * 0.08
            ax.errorbar(x + off, d.estimate, yerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="-o", ms=4, capsize=2,
                        color=c, lw=1, label=CUE_METRIC_LABELS.get(eff, eff))
        ax.axhline(0, color="grey", lw=0.8, ls="--")
        ax.set_xticks(x, [f"{iv}\n{INTERVENTION_NAMES[iv]}" for iv in ivs], fontsize=8)
        ax.set_title(lab.get(llm, llm), fontsize=9)
    axes[0, 0].set_ylabel(f"effect on P(choose B), pp ({STRATUM_LABELS[stratum]} worlds)")
    axes[0, -1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    return fig


RANK_VARS = {"cue": ("tau",), "intervention": ("tau",), "discernment": ("move_tau", "fraction_tau")}
RANK_BINS = 20
RANK_BAND = 0.99  # the band: where a bin's count falls with this probability under uniform ranks


def parameter_label(var: str, coord: str | None = None) -> str:
    """A saved fit's parameter as a reader sees it: 'move_tau' + 'improvement' -> 'P(move): between-LLM SD τ,
    improvement I' (labels from core.vocab)."""
    part, _, rest = var.partition("_")
    if part in DISCERNMENT_PARTS and rest:
        name = f"{DISCERNMENT_PARTS[part]}: " + MODEL_PARAMETER_LABELS.get(rest, rest).replace("between-LLM",
                                                                                              "between-group")
    else:
        name = MODEL_PARAMETER_LABELS.get(var, var)
    if coord is None:
        return name
    label = CUE_LABELS.get(coord) or DISCERNMENT_TERMS.get(coord) or coord
    return f"{name}, {label}"


def _rank_panels(m, variables: list[str]):
    """[(title, draws[chain, draw])] for each coordinate of each variable."""
    post = m.idata["posterior"]
    panels = []
    for v in variables:
        da = post[v]
        extra = [d for d in da.dims if d not in ("chain", "draw")]
        if not extra:
            panels.append((parameter_label(v), np.asarray(da.transpose("chain", "draw").values)))
            continue
        stacked = da.stack(_coord=extra).transpose("chain", "draw", "_coord")
        for k, c in enumerate(stacked["_coord"].values):
            c = c if isinstance(c, str) else " / ".join(map(str, np.atleast_1d(c)))
            panels.append((parameter_label(v, str(c)), np.asarray(stacked.values[:, :, k])))
    return panels


@_closed
def rank_plot(ctx: ReportContext, kind: str = "cue", var_names: tuple[str, ...] | None = None):
    """Rank histograms of a saved fit's between-group scales: all draws ranked together, one line
    per chain over RANK_BINS bins, with the band where a bin's count lies with probability RANK_BAND
    under uniform ranks (binomial, n = draws per chain, p = 1 / RANK_BINS). Chains that mix well are
    flat and inside the band (Vehtari et al. 2021, rank plots)."""
    from scipy.stats import binom, rankdata
    m = ctx.model(kind)
    if m is None:
        return None  # the diagnostics table says why (no saved fit, or no trials of its design)
    present = [v for v in (var_names or RANK_VARS.get(kind, ("tau",))) if v in m.idata["posterior"].data_vars]
    panels = _rank_panels(m, present)
    ncol = 3
    nrow = int(np.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(12, 2.3 * nrow + 0.6), sharey=True, squeeze=False)
    for ax, (title, draws) in zip(axes.flat, panels):
        n_chain, n_draw = draws.shape
        ranks = rankdata(draws.ravel()).reshape(draws.shape)
        edges = np.linspace(0.5, draws.size + 0.5, RANK_BINS + 1)
        lo, hi = binom.interval(RANK_BAND, n_draw, 1 / RANK_BINS)
        ax.axhspan(lo, hi, color="#dddddd", lw=0)
        ax.axhline(n_draw / RANK_BINS, color="grey", lw=0.8, ls="--")
        for c in range(n_chain):
            counts, _ = np.histogram(ranks[c], edges)
            ax.step(np.arange(RANK_BINS + 1), np.append(counts, counts[-1]), where="post", lw=1.2,
                    color=OKABE_ITO[c % len(OKABE_ITO)], label=f"chain {c + 1}")
        ax.set_title(title, fontsize=10)
        ax.set_xticks([0, RANK_BINS / 2, RANK_BINS], ["lowest", "", "highest"], fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"draws per bin ({RANK_BINS} rank bins)", fontsize=9)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="lower left")
    fig.tight_layout(h_pad=1.2)
    _flag(fig, ctx, kind)
    return fig


@_closed
def latency_hist(ctx: ReportContext):
    log = ctx.db.trial_log()
    if log.empty or log.latency_ms.isna().all():
        return _empty("no latency recorded (imported trials)")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    lab = _llm_label(ctx)
    col = llm_colors(ctx)
    lat = log.latency_ms.dropna()
    lat = lat[lat > 0]
    bins = np.geomspace(max(lat.min(), 0.01), lat.max() * 1.001, 41) if len(lat) else 40
    for llm, d in log.groupby("llm"):  # outlines, not filled bars: overlapping LLMs stay readable
        ax.hist(d.latency_ms.dropna(), bins=bins, histtype="step", lw=1.6, color=col.get(llm, "black"),
                label=lab.get(llm, llm))
    ax.set_xscale("log")
    ax.set_xlabel("latency per trial (ms, log scale)")
    ax.set_ylabel("trials per bin")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


@_closed
def update_fraction_ppc(ctx: ReportContext, bins: int = 50):
    """Observed update fractions of the partial moves (a histogram, bins of 1/``bins``) against the
    discernment model's posterior predictive: per bin the median and the 94 % interval of the
    replicated counts over the saved predictive draws."""
    m = ctx.model("discernment")
    if m is None or "posterior_predictive" not in m.idata.children:
        return _empty("no saved discernment fit with posterior predictive draws")
    obs, rep = m.predictive_fractions()
    edges = np.linspace(0, 1, bins + 1)
    o = np.histogram(obs, edges)[0]
    r = np.stack([np.histogram(x, edges)[0] for x in rep])
    lo, med, hi = np.quantile(r, [0.03, 0.5, 0.97], axis=0)
    mid = (edges[:-1] + edges[1:]) / 2
    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.fill_between(mid, lo, hi, step="mid", color=OKABE_ITO[0], alpha=0.25, label="posterior predictive, 94%")
    ax.step(mid, med, where="mid", color=OKABE_ITO[0], lw=1, label="posterior predictive, median")
    ax.step(mid, o, where="mid", color="black", lw=1.5, label=f"observed ({len(obs):,} partial moves)")
    ax.set_xlabel("update fraction f = (P2 − P1) / (C − P1) of a partial move")
    ax.set_ylabel(f"moves per bin of {1 / bins:g}")
    ax.set_xlim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=8)
    fig.tight_layout()
    _flag(fig, ctx, "discernment")
    return fig

