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

from ..stats.l2d import OUTCOMES  # noqa: E402
from .context import ReportContext  # noqa: E402
from .tables import CUE_EFFECTS, _llm_label  # noqa: E402

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
    ax.set_xlabel("share of valid posteriors with C ≠ T (%)")
    ax.set_xlim(0, 100)
    ax.legend(ncol=3, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(w) < 4 else -0.12))
    fig.tight_layout()
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
    fig, axes = plt.subplots(1, 2 if model is not None else 1, figsize=(12 if model is not None else 6, 0.45 * rows + 1.8),
                             squeeze=False)
    ax = axes[0, 0]
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
        s = model.summary()
        s = s[s.term == "popularity - reliability"]
        ax2 = axes[0, 1]
        groups = [g for g in dict.fromkeys(s.group) if g != "(mean over groups)"] + ["(mean over groups)"]
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
    ax.set_xticks(range(w.shape[1]), w.columns, rotation=35, ha="right")
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
        ax.set_yticks(y, d.index)
        ax.set_title(lab.get(llm, llm), fontsize=9)
        ax.set_xlabel("pp (95% CI)")
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
    fig, ax = plt.subplots(figsize=(6, 5))
    for i, (llm, d) in enumerate(s.groupby("llm")):
        ax.errorbar(d["true logit (simulator)"], d.logit_mean, yerr=[d.logit_mean - d.logit_hdi_lo,
                    d.logit_hdi_hi - d.logit_mean], fmt="o", capsize=3, color=COLORS[i % 5], label=llm)
    lim = [min(s.logit_hdi_lo.min(), s["true logit (simulator)"].min()) - 0.3,
           max(s.logit_hdi_hi.max(), s["true logit (simulator)"].max()) + 0.3]
    ax.plot(lim, lim, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("true weight (simulator profile, logit)")
    ax.set_ylabel("posterior mean and 94% HDI (logit)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@_closed
def contrast_forest(ctx: ReportContext):
    """Intervention contrasts: bootstrap 95% CI (circles) beside the posterior 94% HDI (squares)."""
    from .tables import contrasts_frame
    c = contrasts_frame(ctx)
    if c.empty:
        return _empty("no intervention arms collected")
    c = c[c.scope == "all"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * len(c) / 2 + 2), sharey=True)
    for ax, ep in zip(axes, ("swap", "abs_text_order")):
        d = c[c.endpoint == ep].reset_index(drop=True)
        labels = [f"{r.llm} {r.contrast}" for r in d.itertuples()]
        y = np.arange(len(d))
        ax.errorbar(d.estimate, y - 0.12, xerr=[d.estimate - d.lo, d.hi - d.estimate], fmt="o", capsize=2,
                    color=COLORS[0], label="bootstrap 95% CI")
        if "posterior_mean" in d:
            ax.errorbar(d.posterior_mean, y + 0.12, xerr=[d.posterior_mean - d.hdi_lo, d.hdi_hi - d.posterior_mean],
                        fmt="s", capsize=2, color=COLORS[2], label="posterior 94% HDI")
        for yy, rej in zip(y, d.reject):
            if rej:
                ax.text(ax.get_xlim()[1], yy, " *", va="center")
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_title("swap effect" if ep == "swap" else "|text-order effect|")
        ax.set_xlabel("difference (pp)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


@_closed
def rank_plot(ctx: ReportContext, kind: str = "cue", var_names: tuple[str, ...] = ("tau",)):
    """ArviZ rank plots of hyper-parameters of a saved fit (uniform ranks = good mixing)."""
    import arviz as az
    m = ctx.model(kind)
    if m is None:
        return _empty(f"no saved {kind} fit")
    present = [v for v in var_names if v in m.idata["posterior"].data_vars]
    pc = az.plot_rank(m.idata, var_names=present)
    ax = np.asarray(pc.viz["plot"][present[0]].values).flat[0]  # ArviZ 1.x: a PlotCollection
    return ax.figure


@_closed
def latency_hist(ctx: ReportContext):
    log = ctx.db.trial_log()
    if log.empty or log.latency_ms.isna().all():
        return _empty("no latency recorded (imported trials)")
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, (llm, d) in enumerate(log.groupby("llm")):
        ax.hist(d.latency_ms.dropna(), bins=40, alpha=0.6, color=COLORS[i % 5], label=llm)
    ax.set_xlabel("latency per trial (ms)")
    ax.set_ylabel("trials")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
