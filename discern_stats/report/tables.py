"""Publication tables (great_tables) for the report pages. Each returns a ``GT`` object and
takes a `ReportContext`; the underlying DataFrame is available as ``<name>_frame``."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from great_tables import GT, loc, style

from ..core.errors import InputError

from ..core.vocab import (CHANCE, CLAIM_AGREES, CONTRAST_ENDPOINT_LABELS, CUE_LABELS, CUE_METRIC_LABELS,
                          DESIGN_LABELS, DISCERNMENT_PARTS, MODEL_LABELS, MODEL_PARAMETER_LABELS, OUTCOME_GROUP_LABELS,
                          SIMULATOR_TAG, SUBGROUP_TAG_LABELS, TRIAL_STATE_LABELS,
                          INTERVENTION_NAMES, INTERVENTIONS, L2D_METRIC_LABELS, L2D_RANGES, MEAN_OVER_GROUPS,
                          OUTCOME_DEFINITIONS, OUTCOME_DENOMINATOR, OUTCOME_GROUPS, PAPER_PROFILE, POPULATION_MEAN,
                          PROBE_LABELS, STRATEGIES, STRATEGY_LABELS,
                          STRATUM_LABELS, STRATUM_SETS, TRIAL_STATUSES, parse_rule_label)
from .context import ReportContext

SIM = SIMULATOR_TAG
NBSP = "\u00a0"  # inside an interval, so it never wraps within its brackets


def _gt(df: pd.DataFrame, **kw) -> GT:
    """A great_tables table whose row labels (the stub, or an 'LLM' column) never wrap."""
    t = GT(df, **kw).tab_options(container_width="100%", table_font_size="14px", source_notes_font_size="12px",
                                 data_row_padding="4px", heading_subtitle_font_size="13px")
    if kw.get("rowname_col"):
        t = t.tab_style(style.text(whitespace="nowrap"), loc.stub())
    elif "LLM" in df.columns:
        t = t.tab_style(style.text(whitespace="nowrap"), loc.body(columns="LLM"))
    return t


def _llm_label(ctx: ReportContext) -> dict[str, str]:
    t = ctx.llm_table()
    return {r.name: r.name + (SIM if r.is_simulator else "") for r in t.itertuples()}


def _ci(est: float, lo: float, hi: float, digits: int = 3) -> str:
    """'est [lo, hi]': a narrow column may wrap between the estimate and its interval, never inside the
    brackets (a non-breaking space)."""
    if pd.isna(est):
        return "–"
    if pd.isna(lo):
        return f"{est:,.{digits}f}"
    return f"{est:,.{digits}f} [{lo:,.{digits}f},{NBSP}{hi:,.{digits}f}]"  # may wrap before the interval


def needs(design: str):
    """A table or figure of ``design`` ('l2d' or 'cue') shows nothing (None) when the database has no
    trial of it; the page says so once (`missing_design_note`) instead of every table repeating it."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(ctx: ReportContext, *a, **k):
            return fn(ctx, *a, **k) if ctx.has(design) else None
        return inner
    return wrap


def missing_design_note(ctx: ReportContext, design: str) -> "_HTML | None":
    """One line at the top of a page whose design the database lacks (None when it has trials)."""
    if ctx.has(design):
        return None
    import html
    return _HTML(f"<p><b>{html.escape(ctx.no_trials_note(design))}</b>: this page has nothing to show.</p>")


def sources_line(ctx: ReportContext) -> str:
    """Where the Design A sources come from, in one line ('' without Design A requests)."""
    src = ctx.db.l2d_sources()
    if src.empty:
        return ""
    from ..designs import source_provenance
    return source_provenance(src)


class _HTML:
    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html


def sources_paragraph(ctx: ReportContext) -> _HTML:
    """The Design A page's paragraph on where its sources come from (HTML, for both renderers)."""
    import html
    line = sources_line(ctx) or "the database has no planned Design A requests"
    warn = fictional_sources(ctx)
    return _HTML(f"<p{' style=\"color:#b00020\"' if warn else ''}><b>Sources.</b> {html.escape(line)}.</p>"
                 "<p>Real sources take their reliability from Lin et al. (2023) PC1 and their popularity from an "
                 "imported ranking (Open PageRank or Tranco); fictional ones are the 24 invented demo domains, which no "
                 "model can know: on them SD, ρ(Δ, popularity) and perception vs execution measure nothing about "
                 "real reputations.</p>")


def fictional_sources(ctx: ReportContext) -> bool:
    src = ctx.db.l2d_sources()
    return bool(len(src)) and bool(src["fictional"].astype(bool).any())


def _sources_note(ctx: ReportContext) -> str:
    line = sources_line(ctx)
    return f"Sources: {line}." if line else "Sources: the database has no planned Design A requests."


STATUS_LABELS = {**TRIAL_STATUSES, **TRIAL_STATE_LABELS}


def overview_frame(ctx: ReportContext) -> pd.DataFrame:
    info = ctx.db.info()
    rows = [{"design": DESIGN_LABELS.get(e["design"], e["design"]), "LLM": e["llm"] + (SIM if e["simulator"] else ""),
             "planned": e["planned"], "done": e["done"], "valid": e["valid"],
             "valid %": np.nan if e["validity_rate"] is None else 100 * e["validity_rate"],
             "lenient valid %": np.nan if e["lenient_validity_rate"] is None else 100 * e["lenient_validity_rate"]}
            for e in info["per_llm"]]
    return pd.DataFrame(rows)


PARSE_NOTE = ("Valid: the strict parse, the format the prompt asks for (what every statistic uses); lenient: "
              "answers recovered from other common shapes too (prose around the JSON, a code fence, **5**, "
              "\"Answer: B\"). A gap between them is a format problem, not a content one. An answer cut off at "
              "the token limit or outside the options is invalid in both.")


def overview_table(ctx: ReportContext) -> GT:
    df = overview_frame(ctx)
    return (_gt(df, rowname_col="LLM", groupname_col="design")
            .tab_header("Trials per design and LLM", "valid % = valid answers / finished trials")
            .cols_label(done="finished").fmt_number(columns=["valid %", "lenient valid %"], decimals=1)
            .fmt_integer(columns=["planned", "done", "valid"]).tab_source_note(PARSE_NOTE))


L2D_ORDER = ["SD", "TD", "CD", "rel_propensity", "truth_propensity"]
L2D_NAMES = {k: L2D_METRIC_LABELS[k] for k in L2D_ORDER}


def _strategies(present) -> list[str]:
    """Strategies in the paper's order: zero-shot first, the pooled rows last."""
    return [s for s in list(STRATEGIES) + ["(all)"] if s in set(present)]


def discernment_frame(ctx: ReportContext) -> pd.DataFrame:
    """The main Design A table (seed 000 Table 1): one block per strategy (zero-shot first), one row
    per LLM, then the random-chance and theoretical-range rows."""
    m_all = ctx.metrics("l2d")
    m = m_all[m_all.metric.isin(L2D_ORDER)]
    lab = _llm_label(ctx)
    rows = []
    for strat in _strategies(m.strategy):
        d = m[m.strategy == strat]
        cells = d.assign(cell=[_ci(e, lo, hi) for e, lo, hi in zip(d.estimate, d.lo, d.hi)]).pivot(
            index="llm", columns="metric", values="cell")
        inv = d.groupby("llm")["n_invalid"].first()
        pa = m_all[(m_all.strategy == strat) & (m_all.metric == "prior_accuracy")].set_index("llm")
        cd_n = d[d.metric == "CD"].set_index("llm")["n"]
        for llm in cells.index:
            prior = (f"{int(round(pa.at[llm, 'estimate'] * pa.at[llm, 'n'])):,} of {int(pa.at[llm, 'n']):,}"
                     if llm in pa.index and pd.notna(pa.at[llm, "estimate"]) else "–")
            rows.append({"strategy": STRATEGY_LABELS.get(strat, strat), "LLM": lab.get(llm, llm),
                         **{L2D_NAMES[k]: cells.at[llm, k] if k in cells.columns else "–" for k in L2D_ORDER},
                         "correct priors": prior, "CD trials": f"{int(cd_n.get(llm, 0)):,}",
                         "invalid (excluded)": f"{int(inv.get(llm, 0)):,}"})
    ref = "Reference values"
    rows.append({"strategy": ref, "LLM": "random chance", **{L2D_NAMES[k]: f"{CHANCE[k]:.3f}" for k in L2D_ORDER},
                 "correct priors": "–", "CD trials": "–", "invalid (excluded)": "–"})
    rows.append({"strategy": ref, "LLM": "theoretical range",
                 **{L2D_NAMES[k]: f"[{L2D_RANGES[k][0]:g},{NBSP}{L2D_RANGES[k][1]:g}]" for k in L2D_ORDER},
                 "correct priors": "–", "CD trials": "–", "invalid (excluded)": "–"})
    return pd.DataFrame(rows)


@needs("l2d")
def discernment_table(ctx: ReportContext) -> GT:
    m = ctx.metrics("l2d")
    interval = m["interval"].iloc[0] if len(m) else ""
    title = "Discernment per prompt strategy (Design A)" + (" — FICTIONAL SOURCES" if fictional_sources(ctx) else "")
    t = (_gt(discernment_frame(ctx), rowname_col="LLM", groupname_col="strategy")
            .tab_header(title, f"estimate [{interval}]")
            .tab_source_note("Δ = |P1 − P2| (the update), R = source reliability, I = |P1 − T| − |C − T| (how much "
                             "closer the claim C is to the truth T than the prior P1). SD = Spearman ρ(Δ, R); "
                             "TD = Spearman ρ(Δ, I); CD (Correct Defense) = share of correct priors that stay correct "
                             "against a wrong claim, 1 − P(P2 ≠ T | P1 = T, C ≠ T), where “= T” is the item's "
                             "correctness rule (e.g. within 5 %); correct priors: k of n priors (one per item and "
                             "strategy); CD trials: the posteriors CD rests on. Reliability (truth) propensity = "
                             "P(Δ larger for the more reliable source (larger I)), ties 1/2, pairs within strategy, "
                             "item and factor (source). Invalid answers are counted and excluded.")
            .tab_source_note(_sources_note(ctx)))
    note = _simulator_td_note(ctx)
    return t.tab_source_note(note) if note else t


def _simulator_td_note(ctx: ReportContext) -> str:
    """Why the simulators' TD is negative (their design), when the table has simulators."""
    if not ctx.llm_table()["is_simulator"].astype(bool).any():
        return ""
    return ("Why the simulators' TD is negative: each moves a fraction of the way from its prior to the claim, a "
            "fraction that depends only weakly on I (discern_stats/data/profiles.yaml), so Δ = fraction × |C − P1| "
            "grows with the claim's distance from the prior. With priors near the truth, the claims furthest from "
            "the prior (factor 3, then 1/3) are those furthest from the truth, the lowest I: a negative TD by "
            "their design.")




def outcome_frame(ctx: ReportContext) -> pd.DataFrame:
    """Outcome shares (%) with intervals per strategy and LLM, columns grouped good / neutral / bad."""
    m = ctx.metrics("l2d")
    m = m[m.metric.str.startswith("share: ")]
    lab = _llm_label(ctx)
    cols = [o for g in OUTCOME_GROUPS.values() for o in g] + [CLAIM_AGREES, "Invalid", "Invalid (lenient)"]
    rows = []
    for strat in _strategies(m.strategy):
        d = m[m.strategy == strat]
        for llm, g in d.groupby("llm", sort=True):
            g = g.set_index(g.metric.str.removeprefix("share: "))
            rows.append({"strategy": STRATEGY_LABELS.get(strat, strat), "LLM": lab.get(llm, llm),
                         **{c: _ci(100 * g.at[c, "estimate"], 100 * g.at[c, "lo"], 100 * g.at[c, "hi"], 1)
                            if c in g.index else "–" for c in cols}})
    return pd.DataFrame(rows, columns=["strategy", "LLM"] + cols)


@needs("l2d")
def outcome_table(ctx: ReportContext) -> GT:
    df = outcome_frame(ctx)
    t = _gt(df, rowname_col="LLM", groupname_col="strategy").tab_header(
        "Outcome taxonomy (Design A)", f"share of the {OUTCOME_DENOMINATOR}, %, with intervals")
    for key, names in OUTCOME_GROUPS.items():
        t = t.tab_spanner(OUTCOME_GROUP_LABELS[key], columns=names)
    t = t.tab_spanner("Outside the five", columns=[CLAIM_AGREES, "Invalid", "Invalid (lenient)"])
    return (t.tab_source_note("; ".join(f"{k}: {v}" for k, v in OUTCOME_DEFINITIONS.items()) + " (correct = the "
                              "item's correctness rule). The five sum to 100 % of the posteriors whose claim conflicts "
                              f"with the prior, as in seed 000. {CLAIM_AGREES} (C = P1) is a share of all valid "
                              "posteriors, Invalid a share of all trials (strict parse: the shares use its valid "
                              "answers); Invalid (lenient): still invalid under the lenient parse.")
            .tab_source_note(_sources_note(ctx)))


SUBGROUP_TAGS = SUBGROUP_TAG_LABELS


def subgroup_frame(ctx: ReportContext) -> pd.DataFrame:
    """Gaps between item subgroups (seed 000): prior accuracy, appropriate-update share, SD, TD."""
    rows = []
    lab = _llm_label(ctx)
    for tag, tag_label in SUBGROUP_TAGS.items():
        g = ctx.subgroup_gaps(tag)
        if g.empty:
            continue
        g = g[g.strategy == "(all)"]
        for r in g.itertuples():
            pct = r.metric.split(" gap")[0] in ("prior accuracy", "appropriate-update share")
            k = 100 if pct else 1
            rows.append({"subgroup": f"{tag_label}: {r.contrast.replace(' - ', ' − ')}", "LLM": lab.get(r.llm, r.llm),
                         "metric": r.metric.replace(" gap", "") + (" (pp)" if pct else ""),
                         "cell": _ci(k * r.estimate, k * r.lo, k * r.hi, 1 if pct else 3)})
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    w = df.pivot(index=["subgroup", "LLM"], columns="metric", values="cell").reset_index()
    order = ["prior accuracy (pp)", "appropriate-update share (pp)", "SD", "TD"]
    return w[["subgroup", "LLM"] + [c for c in order if c in w.columns]]


def _invalid_prior_note(ctx: ReportContext) -> str:
    """': k invalid priors counted as wrong' over the gap tables shown (empty when none or unknown)."""
    k = 0
    for tag in SUBGROUP_TAGS:
        g = ctx.subgroup_gaps(tag)
        if not g.empty and "n_invalid_prior" in g.columns:
            k = max(k, int(g[(g.strategy == "(all)") & (g.metric == "prior accuracy gap")]["n_invalid_prior"].sum()))
    return f": {k:,} here" if k else ": none here"


@needs("l2d")
def subgroup_table(ctx: ReportContext) -> GT:
    df = subgroup_frame(ctx)
    if df.empty:
        return _gt(pd.DataFrame({"note": ["no item tag among era and oecd has two levels in these trials (import "
                                          "items with those columns to see the gaps)"]}))
    return (_gt(df, rowname_col="LLM", groupname_col="subgroup")
            .tab_header("Subgroup gaps (Design A, all strategies pooled)",
                        "level − reference level (seed 000's direction: OECD yes − no, post-internet − "
                        "pre-internet), estimate [interval]")
            .tab_source_note("Prior accuracy: share of priors correct under the item's rule (one prior per strategy "
                             "and item; an invalid prior counts as wrong" + _invalid_prior_note(ctx) + "). "
                             "Appropriate-update share: of the posteriors whose claim conflicts with the prior (C ≠ P1). "
                             "Items are resampled within each level; the source term is that of the difference on the shared sources. "
                             "Intervals are per cell, not adjusted across LLMs, subgroups or metrics.")
            .tab_source_note(_sources_note(ctx)))


def perception_frame(ctx: ReportContext) -> pd.DataFrame:
    """Reliability strategy: SD ρ(Δ, R) (acting on true reliability) beside ρ(R̂, R) (perceiving it) and
    ρ(Δ, R̂) (acting on one's own rating)."""
    m = ctx.metrics("l2d")
    keys = ["SD", "rho_rhat_R", "rho_delta_rhat"]
    m = m[(m.strategy == "Reliability") & m.metric.isin(keys)]
    names = {"SD": "ρ(Δ, R): acting on R", "rho_rhat_R": "ρ(R̂, R): perception", "rho_delta_rhat":
             "ρ(Δ, R̂): execution"}
    if m.empty:
        return pd.DataFrame(columns=["LLM"] + list(names.values()))
    lab = _llm_label(ctx)
    w = m.assign(cell=[_ci(e, lo, hi) for e, lo, hi in zip(m.estimate, m.lo, m.hi)]).pivot(
        index="llm", columns="metric", values="cell")
    w = w[[k for k in keys if k in w.columns]]
    w.index = [lab.get(i, i) for i in w.index]
    return w.rename(columns=names).reset_index(names="LLM")


@needs("l2d")
def perception_table(ctx: ReportContext) -> GT:
    return (_gt(perception_frame(ctx)).tab_header("Perception vs execution (Reliability strategy)",
                                                 "Spearman ρ, estimate [interval]; chance value 0")
            .tab_source_note("R = source reliability, R̂ = the LLM's own 0–1 rating of the source, Δ = |P1 − P2|. "
                             "Perceiving reliability without acting on it shows as ρ(R̂, R) > 0 with ρ(Δ, R̂) ≈ 0.")
            .tab_source_note(_sources_note(ctx)))


CUE_EFFECTS = ["swap", "Q", "I", "R", "text_order", "event_time", "repetition", "speaker", "lineage"]
CUE_ACC = ["recognition", "recognition_HH", "recognition_LL", "count_single", "count_joint", "initial_state",
           "provenance", "verified", "valid_rate", "valid_rate_lenient"]


def _cell(d: pd.DataFrame, metric: str, digits: int = 1) -> str:
    r = d[d.metric == metric]
    return "–" if r.empty else _ci(r.estimate.iloc[0], r.lo.iloc[0], r.hi.iloc[0], digits)


CONDITIONAL_EFFECTS = ["order_at_08", "order_at_12", "time_if_A_first", "time_if_B_first", "swap_if_recognised"]


def cue_profile_frame(ctx: ReportContext, intervention: str = "C0", stratum: str = "core",
                      kind: str = "effect_pp", conditional: bool | None = None) -> pd.DataFrame:
    """Cue effects (``kind='effect_pp'``) or identification accuracies (``'accuracy_pct'``) per LLM,
    with human labels (`core.vocab.CUE_METRIC_LABELS`)."""
    m = ctx.metrics("cue")
    if m.empty:
        return pd.DataFrame()
    m = m[(m.intervention == intervention) & (m.stratum == stratum) & (m.kind == kind)]
    lab = _llm_label(ctx)
    cells = m.assign(cell=[_ci(e, lo, hi, 1) for e, lo, hi in zip(m.estimate, m.lo, m.hi)])
    w = cells.pivot(index="llm", columns="metric", values="cell")
    if kind != "effect_pp":
        order = CUE_ACC
    else:  # None: both; True / False: only the conditional / only the main effects (one table fits the page)
        order = {None: CUE_EFFECTS + CONDITIONAL_EFFECTS, True: CONDITIONAL_EFFECTS, False: CUE_EFFECTS}[conditional]
    w = w[[c for c in order if c in w.columns]].rename(columns=CUE_METRIC_LABELS)
    w.index = [lab.get(i, i) for i in w.index]
    return w.reset_index(names="LLM")


@needs("cue")
def cue_profile_table(ctx: ReportContext, intervention: str = "C0", stratum: str = "core",
                      kind: str = "effect_pp", conditional: bool | None = None) -> GT:
    """Identification accuracies, or cue effects: ``conditional`` None all, False the nine main effects,
    True the conditional effects that text order, event time and swap average or restrict."""
    df = cue_profile_frame(ctx, intervention, stratum, kind, conditional)
    if df.empty:
        return _gt(pd.DataFrame({"note": ["no Design B trials"]}))
    m = ctx.metrics("cue")
    interval = m["interval"].iloc[0] if len(m) else ""
    what = ("identification accuracies and valid answers (%)" if kind != "effect_pp" else
            "conditional cue effects (pp)" if conditional else "cue effects (pp)")
    t = _gt(df).tab_header(f"{STRATUM_LABELS[stratum]} worlds, {INTERVENTION_NAMES[intervention]} ({intervention}): "
                          f"{what}", f"estimate [{interval}]")
    if kind == "effect_pp" and conditional:
        return t.tab_source_note(
            "Text order, B at 08:00 / 12:00: the text-order effect (B first − A first) among worlds where B's report "
            "is about that time; Event time, A first / B first: the event-time effect (about 12:00 − about 08:00) "
            "with that message first in the text (Text order and Event time in the table above are the means of "
            "these pairs); Swap, worlds recognised: the swap effect on worlds whose two P3c relative-history "
            "answers were both correct. Choice effects use valid pairs. Chance: 0 pp.")
    if kind == "effect_pp":
        return t.tab_source_note(
            "Effects on P(choose B): Swap = LH − HL (B's source has the better history); Reliability = both histories "
            "7/8 − 4/8; Quality = clear − limited identifier; Independence = separate − shared roots; Text order = B "
            "first − A first (mean of its two conditional effects); Event time = B's report about "
            "12:00 − about 08:00 (mean of the two); Repetition, Speakers and Lineage are successive steps single → "
            "repeated → two speakers → separate roots. Choice effects use valid pairs. Chance: 0 pp.")
    return t.tab_source_note("Accuracies use the planned denominator (an invalid answer counts as wrong); recognition = "
                             "mean of HL and LH P3c accuracy (P3c: whose source has the better record); HH/LL: the "
                             "equal-history probes. Chance: 50% (P1, verified), 25% (P2, P3c), 11.1% (single count).")


def cue_paper_frame(ctx: ReportContext, stratum: str = "core", intervention: str = "C0") -> pd.DataFrame:
    """seed 001 Table 2 (Core) and Tables 5-7 (All, Structural, Naturalized): Valid, Rec., Sw., Q, I,
    Text, Time, Ver. per LLM."""
    m = ctx.metrics("cue")
    if m.empty:
        return pd.DataFrame()
    m = m[(m.intervention == intervention) & (m.stratum == stratum)]
    lab = _llm_label(ctx)
    return pd.DataFrame([{"LLM": lab.get(llm, llm), **{head: _cell(d, metric) for metric, head in PAPER_PROFILE}}
                         for llm, d in m.groupby("llm", sort=True)])


@needs("cue")
def cue_paper_table(ctx: ReportContext, stratum: str = "core", intervention: str = "C0") -> GT:
    df = cue_paper_frame(ctx, stratum, intervention)
    n = ctx.trials("cue")
    n_worlds = n[n.stratum.isin(STRATUM_SETS[stratum])].world_id.nunique() if len(n) else 0
    if df.empty:
        return _gt(pd.DataFrame({"note": ["no Design B trials"]}))
    return (_gt(df).tab_header(f"Cue profile, {STRATUM_LABELS[stratum]} worlds ({n_worlds:,}), "
                              f"{INTERVENTION_NAMES[intervention]} ({intervention})",
                              "estimate [95% whole-world bootstrap interval]")
            .tab_spanner("Identification (%)", columns=["Valid", "Lenient", "Rec."])
            .tab_spanner("Cue effects on P(choose B) (pp)", columns=["Sw.", "Q", "I", "Text", "Time"])
            .tab_spanner("Accuracy (%)", columns=["Ver."])
            .tab_source_note("Valid: valid answers of all requests (strict parse: the format the prompt asks for; "
                             "the statistics use these); Lenient: valid under the lenient parse (README). "
                             "Rec.: relative-history recognition, mean of the HL "
                             "and LH P3c accuracy (P3c asks whose source has the better record). "
                             "Sw. = P(B | LH) − P(B | HL) (B's source has the better history); "
                             "Q = clear − limited identifier; I = separate − shared roots; Text = B first − A first; "
                             "Time = B's report about 12:00 − about 08:00 (the later event); Ver.: accuracy of the "
                             "verified choices. Choice effects use valid pairs; accuracies the planned denominator. "
                             "Chance: 0 pp, 50% (Rec., Ver.)."))
def fit_flag(ctx: ReportContext, kind: str) -> str:
    """'' for a converged saved fit; else a warning naming why (shown wherever its numbers appear)."""
    m = ctx.model(kind)
    if m is None:
        return ""
    d = m.diagnostics
    return "" if d.get("ok") else "⚠ NOT CONVERGED: " + "; ".join(d.get("problems", [])) + " (see Model diagnostics)"


def weights_frame(ctx: ReportContext) -> pd.DataFrame:
    """Recovered cue weights beside the synthetic profiles' true weights (where known); long form."""
    m = ctx.model("cue")
    if m is None:
        return pd.DataFrame()
    from ..simulate.respondent import get_profile, true_cue_weights  # (LangChain: imported only when needed)
    s = ctx.summary("cue").copy()
    llms = ctx.llm_table().set_index("name")
    truth = []
    for llm, iv, cue in zip(s.llm, s.intervention, s.cue):
        row = llms.loc[llm] if llm in llms.index else None
        if row is not None and row.provider == "synthetic":
            truth.append(true_cue_weights(get_profile(row.model_id), iv)[cue])
        else:
            truth.append(np.nan)
    s["true logit (simulator)"] = truth
    s["inside 94% HDI"] = [("–" if pd.isna(t) else ("yes" if lo <= t <= hi else "NO"))
                           for t, lo, hi in zip(truth, s.logit_hdi_lo, s.logit_hdi_hi)]
    return s


def weights_wide_frame(ctx: ReportContext) -> pd.DataFrame:
    """One row per LLM and cue, one column per intervention: 'mean [94% HDI]' on the logit scale,
    with the simulator's true weight in parentheses and '✗' when it falls outside the HDI."""
    s = weights_frame(ctx)
    if s.empty:
        return s
    lab = _llm_label(ctx)
    rows = []
    ivs = [iv for iv in INTERVENTIONS if iv in set(s.intervention)]
    for (llm, cue), d in s.groupby(["llm", "cue"], sort=False):
        d = d.set_index("intervention")
        row = {"LLM": lab.get(llm, llm), "cue": CUE_LABELS.get(cue, cue)}
        for iv in ivs:
            if iv not in d.index:
                row[iv] = "–"
                continue
            r = d.loc[iv]
            cell = _ci(r.logit_mean, r.logit_hdi_lo, r.logit_hdi_hi, 2)
            if not pd.isna(r["true logit (simulator)"]):
                cell += f" (true{NBSP}{r['true logit (simulator)']:.2f}" + (f"{NBSP}✗)" if r["inside 94% HDI"] == "NO" else ")")
            row[f"{iv} {INTERVENTION_NAMES[iv]}"] = cell
        rows.append(row)
    return pd.DataFrame(rows)


@needs("cue")
def weights_table(ctx: ReportContext) -> GT:
    df = weights_wide_frame(ctx)
    if df.empty:
        return _gt(pd.DataFrame({"note": [f"no saved cue-weight fit ({ctx.model_error('cue')})"]}))
    flag = fit_flag(ctx, "cue")
    s = weights_frame(ctx)
    n_true = int((s["inside 94% HDI"] != "–").sum())
    n_in = int((s["inside 94% HDI"] == "yes").sum())
    t = (_gt(df, rowname_col="cue", groupname_col="LLM")
         .tab_header("Cue weights from the hierarchical model (logit per cue, posterior mean [94% HDI])",
                     flag or "converged (R-hat ≤ 1.01, ESS ≥ 400)"))
    note = ("A weight is the log-odds difference of choosing B between the two levels of its cue (coded ±0.5). "
            "'true' is a simulator's known weight; ✗ marks a true weight outside its 94% HDI")
    if n_true:
        note += f" ({n_true - n_in:,} of {n_true:,}; about 6% are expected outside under calibration)"
    return t.tab_source_note(note + ".")


def contrasts_frame(ctx: ReportContext) -> pd.DataFrame:
    c = ctx.contrasts()
    if c.empty:
        return c
    out = c[["llm", "contrast", "endpoint", "scope", "estimate", "lo", "hi", "p_value", "p_holm", "reject"]].copy()
    m = ctx.model("intervention")
    if m is not None:
        b = ctx.summary("intervention")[["llm", "contrast", "endpoint", "scope", "posterior_mean", "hdi_lo", "hdi_hi"]]
        out = out.merge(b, on=["llm", "contrast", "endpoint", "scope"], how="left")
    return out


def holm_stars(p_holm: float) -> str:
    """* p_Holm < 0.05, ** < 0.01, *** < 0.001 (seed 001 Table 3)."""
    if pd.isna(p_holm):
        return ""
    return "***" if p_holm < 0.001 else "**" if p_holm < 0.01 else "*" if p_holm < 0.05 else ""


def _contrast_label(c: str) -> str:
    a, b = c.split("-")
    return f"{INTERVENTION_NAMES[a]} − {INTERVENTION_NAMES[b]} ({a}−{b})"


def contrasts_compact_frame(ctx: ReportContext, bayes: bool = False) -> pd.DataFrame:
    """seed 001 Table 3: one row per LLM, endpoint and scope, one column per contrast; bootstrap
    'estimate [95% CI]' with Holm stars, or (``bayes``) 'posterior mean [94% HDI]'."""
    c = contrasts_frame(ctx)
    if c.empty or (bayes and "posterior_mean" not in c.columns):
        return pd.DataFrame()
    lab = _llm_label(ctx)
    rows = []
    for (scope, ep, llm), d in c.groupby(["scope", "endpoint", "llm"], sort=False):
        row = {"group": f"{CONTRAST_ENDPOINT_LABELS.get(ep, ep)}, {STRATUM_LABELS.get(scope, scope)} worlds",
               "LLM": lab.get(llm, llm)}
        for r in d.itertuples():
            if bayes:
                row[_contrast_label(r.contrast)] = _ci(r.posterior_mean, r.hdi_lo, r.hdi_hi, 1)
            else:
                row[_contrast_label(r.contrast)] = _ci(r.estimate, r.lo, r.hi, 1) + holm_stars(r.p_holm)
        rows.append(row)
    return pd.DataFrame(rows)


@needs("cue")
def contrasts_table(ctx: ReportContext) -> GT:
    df = contrasts_compact_frame(ctx)
    if df.empty:
        return _gt(pd.DataFrame({"note": [ctx.contrasts_note()]}))
    n = len(contrasts_frame(ctx))
    raw = ctx.contrasts()
    covered = raw["family_llms"].iloc[0] if "family_llms" in raw.columns and len(raw) else ""
    left = raw["left_out_llms"].iloc[0] if "left_out_llms" in raw.columns and len(raw) else ""
    lab = _llm_label(ctx)
    names = lambda s: ", ".join(lab.get(x, x) for x in s.split(", ")) if s else ""  # noqa: E731
    family = f" (the LLMs collected under every intervention: {names(covered)})" if covered else ""
    left_note = f" Baseline-only LLMs, outside the family: {names(left)}." if left else ""
    return (_gt(df, rowname_col="LLM", groupname_col="group")
            .tab_header("Pre-specified intervention contrasts (pp)",
                        f"estimate [95% interval, paired whole-world bootstrap]; Holm over one declared family of "
                        f"{n:,}{family}")
            .tab_source_note(f"Stars: the contrast's p-value Holm-adjusted over the whole family of {n:,} (4 contrasts × "
                             "2 endpoints × 2 scopes × each LLM in the family): * < 0.05, ** < 0.01, *** < 0.001. The "
                             "intervals are unadjusted 95% intervals, one contrast at a time, so an interval may exclude "
                             "0 without a star: that contrast does not survive the family-wise correction.")
            .tab_source_note("Swap effect = P(B | LH) − P(B | HL); "
                             "|Text-order effect| = |P(B | B first) − P(B | A first)|; a contrast is the effect under "
                             "the first condition minus under the second. Swap contrasts: percentile interval and its "
                             "p-value. |Text-order| contrasts: intersection-union test of equal absolute effects "
                             "(p = the larger of the p-values of the arms' difference and sum) and the interval "
                             "inverted from it, so it excludes 0 exactly when p < 0.05. Base C0, Sham C1 (irrelevant "
                             "table of the ledger's length), Flat C2 (facts as prose), Ledger C3 (facts by source), "
                             "+Rule C4." + left_note))


@needs("cue")
def contrasts_bayes_table(ctx: ReportContext) -> GT:
    df = contrasts_compact_frame(ctx, bayes=True)
    if df.empty:
        return _gt(pd.DataFrame({"note": [f"no saved intervention model ({ctx.model_error('intervention')})"]}))
    flag = fit_flag(ctx, "intervention")
    return (_gt(df, rowname_col="LLM", groupname_col="group")
            .tab_header("The same contrasts from the Bayesian cue-weight model (pp)",
                        f"posterior mean [94% HDI] of the average marginal effect; "
                        f"{flag or 'converged (R-hat ≤ 1.01, ESS ≥ 400)'}"))


@needs("cue")
def contrasts_full_table(ctx: ReportContext) -> GT:
    """Every contrast with raw and Holm p-values (for the appendix and LaTeX export)."""
    c = contrasts_frame(ctx)
    if c.empty:
        return _gt(pd.DataFrame({"note": [ctx.contrasts_note()]}))
    c = c.assign(contrast=[_contrast_label(x) for x in c.contrast],
                 endpoint=[CONTRAST_ENDPOINT_LABELS.get(x, x) for x in c.endpoint],
                 scope=[STRATUM_LABELS.get(x, x) for x in c.scope],
                 llm=[_llm_label(ctx).get(x, x) for x in c.llm],
                 holm=[f"yes {holm_stars(p)}" if r else "no" for r, p in zip(c.reject, c.p_holm)])
    c = c.drop(columns=["reject"]).rename(columns={"llm": "LLM", "estimate": "estimate (pp)", "lo": "CI low",
                                                   "hi": "CI high", "p_value": "p", "p_holm": "p (Holm)",
                                                   "posterior_mean": "posterior mean", "hdi_lo": "HDI low",
                                                   "hdi_hi": "HDI high", "holm": "Holm rejects"})
    num = [x for x in ("estimate (pp)", "CI low", "CI high", "posterior mean", "HDI low", "HDI high") if x in c.columns]
    return (_gt(c).tab_header("Intervention contrasts, all columns")
            .fmt_number(columns=num, decimals=1).fmt_number(columns=["p", "p (Holm)"], decimals=4)
            .tab_source_note(f"CI low / high: the unadjusted 95% paired whole-world bootstrap interval; p: the "
                             f"unadjusted p-value; p (Holm): adjusted over the family of {len(c):,}; Holm rejects: "
                             "p (Holm) < 0.05 (yes, with its stars: * < 0.05, ** < 0.01, *** < 0.001) or not (no). "
                             "HDI: the Bayesian intervention model's 94% highest-density interval."))


def _parameter_name(var: str) -> str:
    """A sampler block's parameter as a reader sees it ('move_theta' -> 'P(move): group coefficients'),
    labels from core.vocab."""
    part, _, rest = var.partition("_")
    if part in DISCERNMENT_PARTS and rest:
        return f"{DISCERNMENT_PARTS[part]}: {MODEL_PARAMETER_LABELS.get(rest, rest)}"
    return MODEL_PARAMETER_LABELS.get(var, var)


def diagnostics_frame(ctx: ReportContext) -> pd.DataFrame:
    rows = []
    for kind in ("cue", "discernment", "intervention"):
        m = ctx.model(kind)
        if m is None:
            rows.append({"model": MODEL_LABELS[kind], "status": f"not available: {ctx.model_error(kind)}"})
            continue
        d = m.diagnostics
        rows.append({"model": MODEL_LABELS[kind],
                     "status": "converged" if d["ok"] else "NOT CONVERGED: " + "; ".join(d["problems"]),
                     "max R-hat": d["max_rhat"], "min bulk ESS": d["min_ess_bulk"], "min tail ESS": d["min_ess_tail"],
                     "divergences": d["divergences"] if m.sampler.get("sampler") != "gibbs" else "n/a (Gibbs)",
                     "sampler": m.sampler.get("sampler"),
                     "min MH acceptance": "; ".join(f"{_parameter_name(k)} {v:.2f}"
                                                    for k, v in m.sampler.get("acceptance", {}).items()),
                     "draws x chains": f"{m.sampler.get('draws')} x {m.sampler.get('chains')}",
                     "wall s": m.sampler.get("wall_s")})
    return pd.DataFrame(rows)


def diagnostics_table(ctx: ReportContext) -> GT:
    return (_gt(diagnostics_frame(ctx)).tab_header("Convergence of the saved fits",
                                                  "thresholds: R-hat ≤ 1.01, bulk and tail ESS ≥ 400, 0 divergences")
            .fmt_number(columns=["max R-hat"], decimals=3).fmt_number(columns=["min bulk ESS", "min tail ESS", "wall s"],
                                                                     decimals=0)
            .sub_missing(missing_text="–"))  # an unavailable fit has no numbers: a dash, not 'None'


def loo_frame(ctx: ReportContext) -> pd.DataFrame:
    """PSIS-LOO of every saved fit (`BayesModel.loo_table`), leaving out one group-effect cluster
    at a time."""
    units = {"cue": "LLM × world", "discernment": "LLM × strategy × item", "intervention": "LLM × world"}
    rows = []
    for kind in ("cue", "discernment", "intervention"):
        m = ctx.model(kind)
        if m is None:
            continue
        try:  # once per saved fit, as the other fit tables (ReportContext.fit_table)
            t = ctx.fit_table(kind, "loo", lambda mm: pd.DataFrame([mm.loo_table()])).to_dict("records")[0]  # ints stay ints
        except InputError as exc:
            rows.append({"model": MODEL_LABELS[kind], "left out": units[kind], "note": str(exc)})
            continue
        rows.append({"model": MODEL_LABELS[kind], "left out": units[kind], "clusters": t["clusters"],
                     "elpd (LOO)": t["elpd_loo"], "SE": t["se"], "p (LOO)": t["p_loo"],
                     "Pareto k > 0.7": t["pareto_k_over_0.7"], "draws": t["draws"], "note": ""})
    out = pd.DataFrame(rows)
    return out.drop(columns="note") if "note" in out and not out["note"].fillna("").astype(bool).any() else out


def loo_table(ctx: ReportContext) -> "GT | _HTML":
    f = loo_frame(ctx)
    if f.empty:
        return _HTML("<p>No saved fit to cross-validate.</p>")
    return (_gt(f).tab_header("Leave-one-cluster-out cross-validation (PSIS-LOO) of the saved fits")
            .fmt_number(columns=[c for c in ("elpd (LOO)", "SE", "p (LOO)") if c in f], decimals=1)
            .sub_missing(missing_text="–")
            .tab_source_note("elpd: expected log predictive density of a left-out cluster's data, summed over the "
                             "clusters (higher is better; compare models on the same data only); p (LOO): the "
                             "effective number of parameters; Pareto k > 0.7: clusters where the importance-sampling "
                             "estimate is unreliable (refit without them to check). A cluster's group effect is "
                             "integrated out, so each value predicts a new item or world of that LLM."))


def discernment_ppc_frame(ctx: ReportContext) -> pd.DataFrame:
    m = ctx.model("discernment")
    if m is None:
        return pd.DataFrame()
    try:
        t = ctx.fit_table("discernment", "predictive_check", lambda mm: mm.predictive_check())
    except InputError:
        return pd.DataFrame()
    return pd.DataFrame({"statistic": t.quantity, "observed": t.observed,
                         "posterior predictive (94% interval)": [_ci(a, b, c) for a, b, c in
                                                                 zip(t.predictive_median, t.predictive_lo,
                                                                     t.predictive_hi)],
                         "observed inside": np.where(t.observed_inside, "yes", "NO")})


def discernment_ppc_table(ctx: ReportContext) -> "GT | _HTML":
    f = discernment_ppc_frame(ctx)
    if f.empty:
        import html
        why = ctx.model_error("discernment") or "the saved fit has none; refit the model"
        return _HTML(f"<p>No posterior predictive check: {html.escape(why)}.</p>")
    return (_gt(f).tab_header("Posterior predictive check of the discernment model")
            .fmt_number(columns=["observed"], decimals=3)
            .tab_source_note("Each part replicated on the rows it models (the model factorises): moving at all over "
                             "every row, moving away among the moves, full adoption (the heap at f = 1, a category "
                             "of its own) among the moves toward the claim, and the fraction f of a partial move "
                             "from its logit-normal. A logit-normal has no heap at f = 0.5: an observed share there "
                             "above its interval is a heap the model does not reproduce. " + fit_flag(ctx, "discernment")))



def quality_frame(ctx: ReportContext) -> pd.DataFrame:
    log = ctx.db.trial_log()
    if log.empty:
        return pd.DataFrame()
    log["status"] = log["status"].fillna(log["state"]).map(lambda x: STATUS_LABELS.get(x, x))
    lab = _llm_label(ctx)
    log["llm"] = log["llm"].map(lambda x: lab.get(x, x))
    log["design"] = log["design"].map(lambda x: DESIGN_LABELS.get(x, x))
    done = log["state"] == "done"
    log["strict valid"] = done & log["valid"].fillna(False).astype(bool)
    # a trial without a lenient parse of its own (imported, or collected before both were stored): its valid
    log["lenient valid"] = done & log["lenient_valid"].fillna(log["valid"]).fillna(False).astype(bool)
    g = log.groupby(["design", "llm"])
    out = g["status"].value_counts().unstack(fill_value=0)
    out.columns.name = None
    out = out[[c for c in STATUS_LABELS.values() if c in out.columns]
              + [c for c in out.columns if c not in STATUS_LABELS.values()]]
    out["trials"] = g.size()
    out["finished"] = g["state"].apply(lambda s: int((s == "done").sum()))
    out["strict valid %"] = 100 * g["strict valid"].sum() / out["finished"].where(out["finished"] > 0)
    out["lenient valid %"] = 100 * g["lenient valid"].sum() / out["finished"].where(out["finished"] > 0)
    out["retries"] = g["n_attempts"].sum() - g.size()
    out["median latency ms"] = g["latency_ms"].median()
    out["tokens in"] = g["tokens_in"].sum()
    out["tokens out"] = g["tokens_out"].sum()
    return out.reset_index().rename(columns={"llm": "LLM"})


def quality_table(ctx: ReportContext) -> GT:
    df = quality_frame(ctx)
    if df.empty:
        return _gt(pd.DataFrame({"note": ["no trials"]}))
    pcts = ["strict valid %", "lenient valid %", "median latency ms"]
    counts = [c for c in df.columns if c not in ("design", "LLM", *pcts)]
    return (_gt(df, rowname_col="LLM", groupname_col="design")
            .tab_header("Data quality", "trials per final status: valid (strict parse), valid only under the lenient "
                                        "parse, unparseable (kept with its raw text), refused, cut off at the token "
                                        "limit, API error after retries, imported; valid % of finished trials")
            .fmt_integer(columns=counts).fmt_number(columns=pcts, decimals=1).tab_source_note(PARSE_NOTE))


def lenient_rules_frame(ctx: ReportContext) -> pd.DataFrame:
    """Trials per LLM and the rule of each parse that found their answer (`collect.parsing`): how
    the lenient parse recovered what the strict one rejected."""
    log = ctx.db.trial_log()
    if log.empty or log["lenient_rule"].isna().all():
        return pd.DataFrame()
    lab = _llm_label(ctx)
    d = log[log["lenient_rule"].notna()].assign(
        LLM=lambda x: x.llm.map(lambda v: lab.get(v, v)), design=lambda x: x.design.map(lambda v: DESIGN_LABELS.get(v, v)),
        valid=lambda x: np.where(x.lenient_valid.fillna(False).astype(bool), "valid", "invalid"))
    out = d.groupby(["design", "LLM", "lenient_rule", "valid"]).size().unstack("valid", fill_value=0).reset_index()
    out.columns.name = None
    for c in ("valid", "invalid"):
        if c not in out.columns:
            out[c] = 0
    out["lenient_rule"] = out["lenient_rule"].map(parse_rule_label)
    return out.rename(columns={"lenient_rule": "rule"})[["design", "LLM", "rule", "valid", "invalid"]]


def lenient_rules_table(ctx: ReportContext) -> GT:
    df = lenient_rules_frame(ctx)
    if df.empty:
        return _gt(pd.DataFrame({"note": ["no trials with both parses stored"]}))
    return (_gt(df, rowname_col="rule", groupname_col="LLM")
            .tab_header("How the lenient parse read each answer",
                        "rule that found the answer (strict: the strict parse did); invalid: out of range or "
                        "ambiguous, e.g. a letter not among the options, 1,5")
            .fmt_integer(columns=["valid", "invalid"]))


def invalid_examples(ctx: ReportContext, n: int = 8) -> GT:
    log = ctx.db.trial_log()
    bad = log[log["valid"] == False].head(n).reset_index(drop=True)  # noqa: E712
    lab = _llm_label(ctx)
    bad = bad.assign(llm=bad.llm.map(lambda x: lab.get(x, x)), design=bad.design.map(lambda x: DESIGN_LABELS.get(x, x)),
                     status=bad.status.map(lambda x: STATUS_LABELS.get(x, x)),
                     probe=[PROBE_LABELS.get(p, p) if isinstance(p, str) and p else PROBE_LABELS.get(st, st)
                            for p, st in zip(bad.probe, bad.get("stage", pd.Series([""] * len(bad))))],
                     lenient_rule=[("–" if pd.isna(r) else parse_rule_label(r))
                                   + ("" if pd.isna(r) else " (valid)" if ok is True else " (invalid)")
                                   for r, ok in zip(bad.lenient_rule, bad.lenient_valid)])
    return _gt(bad[["llm", "design", "probe", "status", "parse_error", "lenient_rule", "raw_response"]].rename(
        columns={"llm": "LLM", "probe": "request", "parse_error": "why it is invalid (strict)", "lenient_rule": "lenient parse",
                 "raw_response": "raw answer"}))


def at_a_glance_frame(ctx: ReportContext) -> pd.DataFrame:
    """The database, the trials and each saved fit's convergence status."""
    info = ctx.db.info()
    rows = [{"item": "database", "value": info["url"]}, {"item": "saved fits", "value": str(ctx.models_dir)}]
    line = sources_line(ctx)
    if line:
        rows.append({"item": "Design A sources", "value": line})
    per_llm = pd.DataFrame(info["per_llm"])
    if len(per_llm):
        for design, d in per_llm.groupby("design"):
            rows.append({"item": DESIGN_LABELS.get(design, design),
                         "value": f"{d.done.sum():,} finished trials of {d.planned.sum():,} planned, "
                                  f"{d.valid.sum():,} valid; {_n_llms(len(d))}"})
    for kind in ("discernment", "cue", "intervention"):
        m = ctx.model(kind)
        rows.append({"item": f"{MODEL_LABELS[kind]} model", "value": f"not available ({ctx.model_error(kind)})"
                     if m is None else (fit_flag(ctx, kind) or "converged (R-hat ≤ 1.01, ESS ≥ 400)")})
    return pd.DataFrame(rows)


def _n_llms(n: int) -> str:
    return f"{n} LLM" if n == 1 else f"{n} LLMs"


def at_a_glance_table(ctx: ReportContext) -> GT:
    """Two columns without headers: what (database, trials per design, each fit) and its value."""
    return (_gt(at_a_glance_frame(ctx)).tab_header("At a glance").tab_options(column_labels_hidden=True)
            .tab_style(style.text(weight="bold", whitespace="nowrap"), loc.body(columns="item")))


def to_latex(table: GT, path: str | None = None) -> str:
    """A table as LaTeX (great_tables ``as_latex``; needs booktabs and caption in the preamble),
    written to ``path`` when given. Example: ``to_latex(contrasts_table(ctx), "table3.tex")``."""
    import warnings
    with warnings.catch_warnings():  # the only style used is 'no wrap' for HTML, meaningless in LaTeX
        warnings.filterwarnings("ignore", message="Styles are not yet supported in LaTeX output")
        tex = table.as_latex()
    if path is not None:
        from pathlib import Path
        Path(path).write_text(tex)
    return tex


# ---------------------------------------------------------------- Design A: the discernment model on the paper's scale
# (issue 25.4 / 25.5): implied effects in percentage points beside SD / TD / CD, the prior predictive check, the prior
# sensitivity and the gate. Everything from saved fits (the page never fits).
IMPLIED_TERMS = {"reliability": "reliability", "popularity": "popularity", "popularity - reliability": "pop. − rel."}
IMPLIED_SPANNERS = {"P(update)": "P(update), pp per −1 → +1 SD", "E[f]": "E[f], pp per −1 → +1 SD"}


def _implied(ctx: ReportContext, which: str, model=None, stem: str | None = None) -> pd.DataFrame | None:
    from ..bayes import implied
    fn = {"effects": implied.implied_effects, "cd": implied.implied_correct_defense}[which]
    return ctx.fit_table("discernment", f"implied_{which}", fn, model=model, stem=stem)


def _group_keys(m) -> dict[str, tuple[str, str]]:
    """Model group -> (llm, strategy) when the fit groups by LLM x strategy (else empty)."""
    if list(m.config["group_by"]) != ["llm", "strategy"]:
        return {}
    d = m.data[["group", "llm", "strategy"]].drop_duplicates("group")
    return {g: (l, s) for g, l, s in zip(d.group, d.llm, d.strategy)}


def implied_frame(ctx: ReportContext) -> pd.DataFrame:
    """One row per LLM x strategy group (strategies in the paper's order) and the mean over groups:
    the model-implied changes of P(update) and E[f] from -1 SD to +1 SD of reliability and of
    popularity and their difference (pp, 94 % HDI), the model's correct-defense rate (%) beside the
    frequentist CD (%), SD and TD (crossed intervals). Internal column ids; labels in `implied_table`."""
    m = ctx.model("discernment")
    if m is None:
        return pd.DataFrame()
    eff, cd = _implied(ctx, "effects"), _implied(ctx, "cd").set_index("group")
    keys = _group_keys(m)
    met = ctx.metrics("l2d")
    met = met[met.metric.isin(["SD", "TD", "CD"])].set_index(["llm", "strategy", "metric"]) if len(met) else None
    lab = _llm_label(ctx)
    groups = sorted(set(eff.group) - {MEAN_OVER_GROUPS},
                    key=lambda g: ((list(STRATEGIES).index(keys[g][1]) if g in keys and keys[g][1] in STRATEGIES
                                    else 99), g))
    rows = []
    for g in groups + [MEAN_OVER_GROUPS]:
        llm, strat = keys.get(g, (g, ""))
        row = {"strategy": "Mean over LLM × strategy groups" if g == MEAN_OVER_GROUPS else STRATEGY_LABELS.get(strat, strat),
               "LLM": "all groups (unweighted mean)" if g == MEAN_OVER_GROUPS else lab.get(llm, llm)}
        e = eff[eff.group == g].set_index(["quantity", "term"])
        for q in IMPLIED_SPANNERS:
            for t in IMPLIED_TERMS:
                row[f"{q}|{t}"] = _ci(*e.loc[(q, t), ["mean", "hdi_lo", "hdi_hi"]], 1) if (q, t) in e.index else "–"
        row["cd_model"] = _ci(*cd.loc[g, ["mean", "hdi_lo", "hdi_hi"]], 1) if g in cd.index else "–"
        for k in ("CD", "SD", "TD"):
            key = (llm, strat, k)
            if g != MEAN_OVER_GROUPS and met is not None and key in met.index:
                r = met.loc[key]
                scale, digits = (100, 1) if k == "CD" else (1, 2)
                row[f"freq_{k}"] = _ci(scale * r.estimate, scale * r.lo, scale * r.hi, digits)
            else:
                row[f"freq_{k}"] = "–"
        rows.append(row)
    return pd.DataFrame(rows)


def discernment_gate_note(ctx: ReportContext) -> "_HTML | None":
    """A visible line on the gate of every fit the model-implied tables rest on: the main discernment
    fit and the saved prior-sensitivity fits (red when any failed; which ones are missing)."""
    import html
    if not ctx.has("l2d"):
        return None
    m = ctx.model("discernment")
    if m is None:
        return _HTML(f"<p><b>Discernment model:</b> no saved fit ({html.escape(str(ctx.model_error('discernment')))}); "
                     "fit it with <code>discern-stats fit discernment</code> (the page never fits).</p>")
    bad = []
    if not m.diagnostics.get("ok"):
        bad.append("the discernment fit: " + "; ".join(m.diagnostics.get("problems", [])))
    fits, missing = ctx.discernment_sensitivity()
    for label, f in fits.items():
        if f.config != m.config and not f.diagnostics.get("ok"):  # the default prior's fit is the main one
            bad.append(f"the fit under the scale prior {label}: " + "; ".join(f.diagnostics.get("problems", [])))
    parts = []
    if bad:
        parts.append("<p style=\"color:#b00020\"><b>⚠ Convergence gate FAILED</b> for " + html.escape(" | ".join(bad))
                     + ". The numbers below from a failed fit are not to be relied on (see Model diagnostics).</p>")
    else:
        parts.append("<p><b>Convergence gate passed</b> (R-hat ≤ 1.01, ESS ≥ 400 for the reported parameters; "
                     "R-hat ≤ 1.05, ESS ≥ 100 for the nuisance ones) by every saved fit shown below.</p>")
    if missing:
        parts.append("<p><b>Prior sensitivity:</b> no saved fit under " + html.escape(", ".join(missing)) + " (run "
                     "<code>discern-stats demo --sensitivity</code>, or "
                     "<code>discernment_prior_sensitivity(df, models_dir=...)</code>).</p>")
    return _HTML("".join(parts))


def _crossed_effects_on(c: dict) -> list[tuple[str, str, float]]:
    """(short label, description, prior SD) of each crossed effect a discernment fit's config has
    (`DiscernmentModel` source_effects / shared_item_effects), the shared item effect first."""
    return [(short, long, float(c[sd])) for on, sd, short, long in (
        ("shared_item_effects", "shared_item_sd", "shared item", "the item effect shared by every group"),
        ("source_effects", "source_sd", "source", "the source effect")) if c.get(on)]


@needs("l2d")
def implied_table(ctx: ReportContext) -> GT:
    df = implied_frame(ctx)
    if df.empty:
        return _HTML(f"<p>No saved discernment fit ({ctx.model_error('discernment')}).</p>")
    flag = fit_flag(ctx, "discernment")
    c = ctx.model("discernment").config
    crossed = [long for _, long, _ in _crossed_effects_on(c)]
    integrated = ("The LLM × item effects" + (f" and {' and '.join(crossed)}" if crossed else "")
                  + " are integrated over their distribution (a new item"
                  + (" from a new source" if c.get("source_effects") else "") + "), not set to 0.")
    t = _gt(df, rowname_col="LLM", groupname_col="strategy").tab_header(
        "The discernment model on the paper's scale (posterior mean [94% HDI]) beside the frequentist metrics",
        flag or "converged (R-hat ≤ 1.01, ESS ≥ 400)")
    for q, label in IMPLIED_SPANNERS.items():
        t = t.tab_spanner(label, columns=[f"{q}|{k}" for k in IMPLIED_TERMS])
    t = t.tab_spanner("Correct defense, %", columns=["cd_model", "freq_CD"])
    t = t.tab_spanner("Frequentist", columns=["freq_SD", "freq_TD"])
    t = t.cols_label(cases={**{f"{q}|{k}": v for q in IMPLIED_SPANNERS for k, v in IMPLIED_TERMS.items()},
                            "cd_model": "model", "freq_CD": "CD (observed)", "freq_SD": "SD ρ(Δ, R)",
                            "freq_TD": "TD ρ(Δ, I)"})
    return t.tab_source_note(
        "P(update) = P(P2 ≠ P1); E[f] = the expected fraction of the way from the prior to the claim, "
        "f = (P2 − P1)/(C − P1), full adoption f = 1, no move 0, a partial move its fraction, a move away from the "
        "claim or past it counted 0 (the model does not describe its size). Each column: the change when the "
        "predictor goes from 1 SD below to 1 SD above its mean (over the distinct sources), the others at their "
        "mean, in percentage points; pop. − rel. = the popularity change minus the reliability change (> 0: "
        f"popularity moves the LLM more). {integrated} Correct defense, model: P(no move) over the group's posteriors with a correct prior "
        "and a wrong claim, at their own predictors; CD (observed): the share of those that stayed correct, with "
        "the crossed-design interval. SD and TD as in the main table. Mean over groups: the unweighted mean of the "
        "groups' quantities (per posterior draw).")


def prior_predictive_frame(ctx: ReportContext) -> pd.DataFrame:
    m = ctx.model("discernment")
    if m is None:
        return pd.DataFrame()
    t = ctx.fit_table("discernment", "prior_predictive", lambda mm: mm.prior_predictive())
    names = {"none": "no move", "partial": "partial move", "full": "full adoption", "away": "away from or past the claim",
             "median partial fraction": "median fraction of a partial move"}
    return pd.DataFrame({"quantity": [names.get(q, q) for q in t.quantity],
                         "prior 5 %": 100 * t.prior_q05, "prior median": 100 * t.prior_median,
                         "prior 95 %": 100 * t.prior_q95, "observed": 100 * t.observed,
                         "observed inside the 90 % band": np.where(t.observed_inside_90, "yes", "NO")})


@needs("l2d")
def prior_predictive_table(ctx: ReportContext) -> GT:
    df = prior_predictive_frame(ctx)
    if df.empty:
        return None
    m = ctx.model("discernment")
    c = m.config
    crossed = "".join(f"; {short} SD HalfNormal({sd:g})" for short, _, sd in _crossed_effects_on(c))
    return (_gt(df, rowname_col="quantity").tab_header("Prior predictive check of the discernment model",
                                                       "share of posteriors (%) simulated from the priors alone")
            .fmt_number(columns=["prior 5 %", "prior median", "prior 95 %", "observed"], decimals=1)
            .tab_source_note(f"200 draws from the priors (slopes: μ ~ N(0, {c['slope_sd']:g}), τ ~ Gamma({c['tau_shape']:g}, "
                             f"{c['tau_shape'] / c['tau_sd']:g}); intercepts N(0, {c['intercept_sd']:g}); LLM × item SD "
                             f"HalfNormal({c['item_sd']:g}){crossed}; residual SD HalfNormal({c['resid_sd']:g})), a response "
                             "simulated for each of the data's posteriors (at most 20,000), and the 5 %, 50 % and 95 % "
                             "quantiles over the draws beside the observed share. A NO is a prior that puts the data "
                             "in its tails."))


def sensitivity_frame(ctx: ReportContext) -> pd.DataFrame:
    """Per saved scale-prior fit: the pooled mean μ of each part's reliability and popularity
    slopes and their difference (logit per SD), the median τ, and the implied P(update) and E[f]
    changes (pp); with each fit's gate."""
    from ..bayes.discernment import DiscernmentModel, sensitivity_fit_name
    fits, _ = ctx.discernment_sensitivity()
    c0 = DiscernmentModel.default_config
    rows = []
    for label, m in fits.items():
        default = (m.config["tau_shape"], m.config["tau_sd"]) == (c0["tau_shape"], c0["tau_sd"])
        block = f"τ ~ {label}" + (" (default)" if default else "")
        gate = "yes" if m.diagnostics.get("ok") else "NO"
        s = ctx.fit_table("discernment", "summary", lambda mm: mm.summary(), model=m,
                          stem=sensitivity_fit_name(m.config["tau_shape"], m.config["tau_sd"]))
        s = s[s.group == POPULATION_MEAN].set_index(["part", "term"])  # mu: where tau's prior acts most
        for part, plabel in DISCERNMENT_PARTS.items():
            if (part, "reliability") not in s.index:
                continue
            tau = [np.median(m.draws(f"{part}_tau")[:, list(m.config["predictors"]).index(k)]) for k in
                   ("reliability", "popularity")]
            rows.append({"prior": block, "row": f"{plabel}: population mean slope μ, logit per SD",
                         **{k: _ci(*s.loc[(part, k), ["mean", "hdi_lo", "hdi_hi"]], 2) for k in IMPLIED_TERMS
                            if (part, k) in s.index},
                         "median τ (rel. / pop.)": f"{tau[0]:.2f} / {tau[1]:.2f}", "gate passed": gate})
        e = _implied(ctx, "effects", model=m, stem=sensitivity_fit_name(m.config["tau_shape"], m.config["tau_sd"]))
        e = e[e.group == MEAN_OVER_GROUPS].set_index(["quantity", "term"])
        for q in IMPLIED_SPANNERS:
            rows.append({"prior": block, "row": f"{q}, pp per −1 → +1 SD",
                         **{k: _ci(*e.loc[(q, k), ["mean", "hdi_lo", "hdi_hi"]], 1) for k in IMPLIED_TERMS
                            if (q, k) in e.index},
                         "median τ (rel. / pop.)": "–", "gate passed": gate})
    return pd.DataFrame(rows, columns=["prior", "row", *IMPLIED_TERMS, "median τ (rel. / pop.)", "gate passed"])


@needs("l2d")
def sensitivity_table(ctx: ReportContext) -> GT:
    df = sensitivity_frame(ctx)
    if df.empty:
        return None
    return (_gt(df, rowname_col="row", groupname_col="prior")
            .tab_header("Prior sensitivity of the discernment model: the between-group scale prior τ",
                        "population mean μ and mean over LLM × strategy groups, posterior mean [94% HDI]")
            .cols_label(cases={k: v for k, v in IMPLIED_TERMS.items()})
            .tab_source_note("Each block is a saved fit of the same model and data under another prior on the "
                             "between-group SD τ of every slope, Gamma(shape, rate) with mean shape / rate: the "
                             "default, a tighter one and the previous Gamma(5, 5). Slopes: log-odds (fraction: logit) "
                             "per SD of the predictor, the pooled mean μ (of the population of groups); pp rows: the "
                             "model-implied changes as in the table above, the unweighted mean over these groups (narrower "
                             "than μ's, which carries the uncertainty of groups not seen). "
                             "Conclusions that hold under every prior do not rest on the choice of τ's prior."))


def strategy_effects_frame(ctx: ReportContext) -> pd.DataFrame:
    """Each prompt strategy's effect on the reliability and popularity slopes and on their
    difference, against zero-shot (`DiscernmentModel.strategy_contrasts`), one row per part x
    strategy; empty when the saved fit has no strategy effects or no zero-shot arm."""
    m = ctx.model("discernment")
    if m is None or not m.config.get("strategy_effects"):
        return pd.DataFrame()
    try:
        t = ctx.fit_table("discernment", "strategy_contrasts",
                          lambda mm: mm.strategy_contrasts(baseline=STRATEGIES[0]))
    except InputError:  # the data have no zero-shot arm to compare with
        return pd.DataFrame()
    t = t[t.term.isin(list(IMPLIED_TERMS))]
    rows = []
    order = {s: i for i, s in enumerate(STRATEGIES)}
    for (part, strat), g in sorted(t.groupby(["part", "strategy"]), key=lambda kv: (list(DISCERNMENT_PARTS).index(kv[0][0]),
                                                                                    order.get(kv[0][1], 99))):
        e = g.set_index("term")
        rows.append({"part": DISCERNMENT_PARTS.get(part, part),
                     "contrast": f"{STRATEGY_LABELS.get(strat, strat)} − {STRATEGY_LABELS.get('zero-shot', 'zero-shot')}",
                     **{k: _ci(*e.loc[k, ["mean", "hdi_lo", "hdi_hi"]], 2) for k in IMPLIED_TERMS if k in e.index},
                     "P(pop. − rel. > 0)": (f"{e.loc['popularity - reliability', 'p_positive']:.2f}"
                                            if "popularity - reliability" in e.index else "–")})
    return pd.DataFrame(rows)


@needs("l2d")
def strategy_effects_table(ctx: ReportContext) -> "GT | _HTML | None":
    m = ctx.model("discernment")
    if m is None:
        return None
    df = strategy_effects_frame(ctx)
    if df.empty:
        why = ("this fit has no strategy effects" if not m.config.get("strategy_effects")
               else "the data have no zero-shot arm to compare with")
        return _HTML(f"<p><b>Strategy effects:</b> {why}; fit the discernment model with "
                     "<code>strategy_effects=True</code> (<code>discern-stats fit discernment --config "
                     "'{\"strategy_effects\": true}'</code>) to estimate each prompt strategy's effect on the slopes "
                     "with an interval.</p>")
    flag = fit_flag(ctx, "discernment")
    return (_gt(df, rowname_col="contrast", groupname_col="part")
            .tab_header("Prompt strategies' effects on the slopes, against zero-shot (posterior mean [94% HDI])",
                        flag or "converged (R-hat ≤ 1.01, ESS ≥ 400)")
            .cols_label(cases={k: v for k, v in IMPLIED_TERMS.items()})
            .tab_source_note("Each strategy's slope averaged over the LLMs minus zero-shot's, in log-odds (fraction: "
                             "logit) per SD of the predictor; the LLM × strategy interaction is the noise of each "
                             "contrast. pop. − rel.: the strategy's effect on the popularity − reliability difference "
                             "(< 0: the strategy moves the LLMs toward weighing reliability more). The HDIs are per "
                             "cell, not adjusted across strategies or parts."))


def responses_frame(ctx: ReportContext) -> pd.DataFrame:
    """Posteriors with C ≠ P1 per LLM x strategy group by response, "away" split into away from the
    claim (f < 0) and past it (f > 1) (`DiscernmentModel.outcome_counts`; from the data, no fit)."""
    from ..bayes import DiscernmentModel
    from ..core.errors import InputError
    from ..core.vocab import AWAY_KINDS, RESPONSES
    m = ctx.model("discernment")
    if m is None:
        try:
            m = DiscernmentModel(ctx.trials("l2d"))
        except InputError:
            return pd.DataFrame()
    c = m.outcome_counts()
    keys = _group_keys(m)
    lab = _llm_label(ctx)
    c["order"] = [(list(STRATEGIES).index(keys[g][1]) if g in keys and keys[g][1] in STRATEGIES else 99, g) for g in c.group]
    c = c.sort_values("order")
    names = {"none": "no move", "partial": "partial", "full": "full adoption", "away": "away (all)"}
    out = pd.DataFrame({"strategy": [STRATEGY_LABELS.get(keys[g][1], keys[g][1]) if g in keys else "" for g in c.group],
                        "LLM": [lab.get(keys[g][0], keys[g][0]) if g in keys else g for g in c.group]})
    for r in RESPONSES:
        out[names[r]] = c[r].to_numpy()
    for k, rule in AWAY_KINDS.items():
        out[f"{k} ({rule})"] = c[k].to_numpy()
    out["posteriors"] = c["rows"].to_numpy()
    return out


@needs("l2d")
def responses_table(ctx: ReportContext) -> GT:
    df = responses_frame(ctx)
    if df.empty:
        return None
    from ..core.vocab import AWAY_KINDS
    away = [f"{k} ({rule})" for k, rule in AWAY_KINDS.items()]
    return (_gt(df, rowname_col="LLM", groupname_col="strategy")
            .tab_header("Responses to a claim that differs from the prior (the discernment model's data)",
                        "posteriors per response, f = (P2 − P1)/(C − P1)")
            .tab_spanner("away, by direction", columns=away)
            .fmt_integer(columns=[c for c in df.columns if c not in ("strategy", "LLM")])
            .tab_source_note("No move: P2 = P1; full adoption: P2 = C; partial: 0 < f < 1; away: f < 0 (away from the "
                             "claim) or f > 1 (past it). The model's P(away | move) part pools the two; the counts show "
                             "which one an LLM's away moves are."))
