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

from ..core.vocab import (CONTRAST_ENDPOINT_LABELS, CUE_METRIC_LABELS, INTERVENTION_NAMES,  # noqa: E402
                          INTERVENTIONS, OUTCOMES, STRATEGIES, STRATUM_LABELS)
from .context import ReportContext  # noqa: E402
from .tables import CUE_EFFECTS, _llm_label, fictional_sources, fit_flag  # noqa: E402

COLORS = ["#1b9e77", "#66a61e", "#7570b3", "#d95f02", "#e7298a"]


def _closed(fn):
    """Close the figure before returning it: it is displayed once, as the cell's value."""
    @functools.wraps(fn)
    def wrapper(*a, **k):
        fig = fn(*a, **k)
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
    if flag:
        fig.suptitle(flag, color="#b00020", fontsize=9)


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
def outcome_shares(ctx: ReportContext):
    """Stacked bars of the five outcome shares per LLM (all strategies)."""
    m = ctx.metrics("l2d")
    if m.empty:
        return _empty("no Design A trials")
    m = m[(m.strategy == "(all)") & m.metric.str.startswith("share: ")]
    w = m.assign(outcome=m.metric.str.removeprefix("share: ")).pivot(index="llm", columns="outcome", values="estimate")[OUTCOMES]
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(w) + 1.5))
    left = np.zeros(len(w))
    for o, c in zip(OUTCOMES, COLORS):
        ax.barh([lab.get(i, i) for i in w.index], 100 * w[o], left=left, color=c, label=o)
        left += 100 * w[o].to_numpy()
    ax.set_xlabel("share of valid posteriors whose claim conflicts with the prior, C ≠ P1 (%)")
    ax.set_xlim(0, 100)
    ax.legend(ncol=3, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(w) < 4 else -0.12))
    fig.tight_layout()
    _source_flag(fig, ctx)
    return fig


@_closed
def popularity_vs_reliability(ctx: ReportContext):
    """ρ(Δ, reliability) and ρ(Δ, popularity) per LLM with 95% intervals; and, when the
    discernment model is saved, the posterior of popularity − reliability slopes."""
    m = ctx.metrics("l2d")
    if m.empty:
        return _empty("no Design A trials")
    m = m[(m.strategy == "(all)") & m.metric.isin(["SD", "rho_pop"])]
    lab = _llm_label(ctx)
    llms = sorted(m.llm.unique())
    model = ctx.model("discernment")
    rows = len(llms) if model is None else max(len(llms), model.data.group.nunique() + 1)
    fig = plt.figure(figsize=(12 if model is not None else 6, 0.45 * rows + 1.8))
    if model is None:
        ax = fig.add_subplot(1, 1, 1)
    else:  # the left panel keeps one row height per LLM; the right one spans the figure
        grid = fig.add_gridspec(2, 2, height_ratios=[len(llms) + 1.5, max(rows - len(llms) - 1.5, 1.0)])
        ax = fig.add_subplot(grid[0, 0])
    for j, (metric, name, c) in enumerate((("SD", "reliability (SD)", COLORS[0]), ("rho_pop", "popularity", COLORS[3]))):
        d = m[m.metric == metric].set_index("llm").loc[llms]
        y = np.arange(len(llms)) + (j - 0.5) * 0.25
        ax.errorbar(d.estimate, y, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", color=c, label=name, capsize=3)
    ax.axvline(0, color="grey", lw=0.8, ls="--")
    ax.set_yticks(np.arange(len(llms)), [lab.get(i, i) for i in llms])
    ax.set_xlabel("Spearman ρ with the update Δ (95% CI)")
    ax.invert_yaxis()  # first LLM on top, as in the right panel
    ax.legend(fontsize=8)
    if model is not None:
        s = ctx.summary("discernment")
        s = s[s.term == "popularity - reliability"]
        ax2 = fig.add_subplot(grid[:, 1])
        order = {k: i for i, k in enumerate(STRATEGIES)}  # LLM, then strategy in the paper's order
        groups = sorted((g for g in dict.fromkeys(s.group) if g != "(mean over groups)"),
                        key=lambda g: (g.split(" / ")[0], order.get(g.split(" / ")[-1], len(order)), g))
        groups.append("(mean over groups)")
        for j, (part, c, name) in enumerate((("move", COLORS[2], "P(move)"),
                                             ("fraction", COLORS[4], "fraction moved (partial)"))):
            d = s[s.part == part].set_index("group").reindex(groups)
            y = np.arange(len(groups)) + (j - 0.5) * 0.25
            ax2.errorbar(d["mean"], y, xerr=[d["mean"] - d.hdi_lo, d.hdi_hi - d["mean"]], fmt="s", color=c,
                         label=name, capsize=3)
        ax2.set_yticks(np.arange(len(groups)), [" / ".join(lab.get(p, p) for p in g.split(" / ")) for g in groups])
        ax2.invert_yaxis()
        ax2.set_xlabel("popularity − reliability slope (logit per SD, 94% HDI)")
        ax2.legend(fontsize=8, loc="lower right")
        ax2.axvline(0, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    _flag(fig, ctx, "discernment")
    _source_flag(fig, ctx)
    return fig


@_closed
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
def identification_vs_influence(ctx: ReportContext, stratum: str = "core"):
    """Recognition of the better source (%) vs the history-swap effect (pp), per LLM."""
    m = _cue_slice(ctx, "C0", stratum)
    if m is None:
        return _empty("no Design B trials")
    rec = m[m.metric == "recognition"].set_index("llm")
    sw = m[m.metric == "swap"].set_index("llm")
    llms = sorted(set(rec.index) & set(sw.index))
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, llm in enumerate(llms):
        r, s = rec.loc[llm], sw.loc[llm]
        ax.errorbar(r.estimate, s.estimate, xerr=[[r.estimate - r.lo], [r.hi - r.estimate]],
                    yerr=[[s.estimate - s.lo], [s.hi - s.estimate]], fmt="o", capsize=3, color=COLORS[i % 5],
                    label=lab.get(llm, llm))
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("relative-reliability recognition (%; HL/LH mean)")
    ax.set_ylabel("history-swap effect (pp)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@_closed
def effect_forest(ctx: ReportContext, stratum: str = "core", intervention: str = "C0"):
    """Forest plot of every cue effect with 95% intervals, one panel per LLM."""
    m = _cue_slice(ctx, intervention, stratum, CUE_EFFECTS)
    if m is None:
        return _empty("no Design B trials")
    llms = sorted(m.llm.unique())
    lab = _llm_label(ctx)
    fig, axes = plt.subplots(1, len(llms), figsize=(3.2 * len(llms), 4), sharey=True, sharex=True, squeeze=False)
    for ax, llm in zip(axes[0], llms):
        d = m[m.llm == llm].set_index("metric").reindex(CUE_EFFECTS).dropna(subset=["estimate"])
        y = np.arange(len(d))
        ax.errorbar(d.estimate, y, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", capsize=3, color=COLORS[2])
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, [CUE_METRIC_LABELS.get(c, c) for c in d.index])
        ax.set_title(lab.get(llm, llm), fontsize=9)
        ax.set_xlabel("pp (95% CI)")
    axes[0, 0].invert_yaxis()  # the first effect on top (the panels share y: invert once)
    fig.tight_layout()
    return fig


@_closed
def weights_recovery(ctx: ReportContext):
    """Recovered logit weights (94% HDI) against the simulators' true weights."""
    from .tables import weights_frame
    s = weights_frame(ctx)
    if s.empty:
        return _empty("no saved cue-weight fit")
    s = s[s.intervention == s.intervention.iloc[0]]
    lab = _llm_label(ctx)
    fig, ax = plt.subplots(figsize=(6, 5))
    for i, (llm, d) in enumerate(s.groupby("llm")):
        ax.errorbar(d["true logit (simulator)"], d.logit_mean, yerr=[d.logit_mean - d.logit_hdi_lo,
                    d.logit_hdi_hi - d.logit_mean], fmt="o", capsize=3, color=COLORS[i % 5], label=lab.get(llm, llm))
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


@_closed
def rank_plot(ctx: ReportContext, kind: str = "cue", var_names: tuple[str, ...] | None = None):
    """ArviZ rank plots of a saved fit's between-group scales (uniform ranks = good mixing)."""
    import arviz as az
    m = ctx.model(kind)
    if m is None:
        return _empty(f"no saved {kind} fit")
    present = [v for v in (var_names or RANK_VARS.get(kind, ("tau",))) if v in m.idata["posterior"].data_vars]
    pc = az.plot_rank(m.idata, var_names=present)
    ax = np.asarray(pc.viz["plot"][present[0]].values).flat[0]  # ArviZ 1.x: a PlotCollection
    fig = ax.figure
    for a in fig.axes:  # one panel per coordinate: short titles, room between rows
        a.set_title(a.get_title().replace("\n", " "), fontsize=7)
        a.tick_params(labelsize=7)
    fig.set_size_inches(max(fig.get_size_inches()[0], 9), max(fig.get_size_inches()[1], 2.2 * np.ceil(len(fig.axes) / 4)))
    fig.tight_layout(h_pad=1.6)
    _flag(fig, ctx, kind)
    return fig


@_closed
def latency_hist(ctx: ReportContext):
    log = ctx.db.trial_log()
    if log.empty or log.latency_ms.isna().all():
        return _empty("no latency recorded (imported trials)")
    fig, ax = plt.subplots(figsize=(6, 3))
    lab = _llm_label(ctx)
    for i, (llm, d) in enumerate(log.groupby("llm")):
        ax.hist(d.latency_ms.dropna(), bins=40, alpha=0.6, color=COLORS[i % 5], label=lab.get(llm, llm))
    ax.set_xlabel("latency per trial (ms)")
    ax.set_ylabel("trials")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
