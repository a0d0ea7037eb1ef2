"""Publication tables (great_tables) for the report pages. Each returns a ``GT`` object and
takes a `ReportContext`; the underlying DataFrame is available as ``<name>_frame``."""

from __future__ import annotations

import numpy as np
import pandas as pd
from great_tables import GT

from ..simulate.respondent import get_profile, true_cue_weights
from ..stats.l2d import CHANCE
from .context import ReportContext

SIM = " (simulator)"


def _llm_label(ctx: ReportContext) -> dict[str, str]:
    t = ctx.llm_table()
    return {r.name: r.name + (SIM if r.is_simulator else "") for r in t.itertuples()}


def _ci(est: float, lo: float, hi: float, digits: int = 3) -> str:
    if pd.isna(est):
        return "–"
    if pd.isna(lo):
        return f"{est:.{digits}f}"
    return f"{est:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def overview_frame(ctx: ReportContext) -> pd.DataFrame:
    info = ctx.db.info()
    rows = [{"design": e["design"], "LLM": e["llm"] + (SIM if e["simulator"] else ""), "planned": e["planned"],
             "done": e["done"], "valid": e["valid"],
             "valid %": np.nan if e["validity_rate"] is None else 100 * e["validity_rate"]} for e in info["per_llm"]]
    return pd.DataFrame(rows)


def overview_table(ctx: ReportContext) -> GT:
    df = overview_frame(ctx)
    return (GT(df).tab_header("Trials per design and LLM", "valid % = valid answers / finished trials")
            .fmt_number(columns=["valid %"], decimals=1).fmt_integer(columns=["planned", "done", "valid"]))


L2D_ORDER = ["SD", "TD", "CD", "rel_propensity", "truth_propensity", "rho_pop"]
L2D_NAMES = {"SD": "SD ρ(Δ, R)", "TD": "TD ρ(Δ, I)", "CD": "CD (Correct Defense)", "rel_propensity": "Reliability propensity",
             "truth_propensity": "Truth propensity", "rho_pop": "ρ(Δ, popularity)"}


def discernment_frame(ctx: ReportContext, strategy: str = "(all)") -> pd.DataFrame:
    m = ctx.metrics("l2d")
    m = m[(m.strategy == strategy) & m.metric.isin(L2D_ORDER)]
    lab = _llm_label(ctx)
    wide = m.assign(cell=[_ci(e, lo, hi) for e, lo, hi in zip(m.estimate, m.lo, m.hi)]).pivot(
        index="llm", columns="metric", values="cell")[L2D_ORDER]
    wide.index = [lab.get(i, i) for i in wide.index]
    chance = pd.DataFrame([{k: f"{CHANCE[k]:.3f}" for k in L2D_ORDER}], index=["random chance"])
    out = pd.concat([wide, chance]).rename(columns=L2D_NAMES)
    inv = m.groupby("llm")["n_invalid"].first()
    out["invalid (excluded)"] = [str(int(inv.get(k.replace(SIM, ""), 0))) if k != "random chance" else "–"
                                 for k in out.index]
    return out.reset_index(names="LLM")


def discernment_table(ctx: ReportContext, strategy: str = "(all)") -> GT:
    m = ctx.metrics("l2d")
    interval = m["interval"].iloc[0] if len(m) else ""
    return (GT(discernment_frame(ctx, strategy)).tab_header(
        "Discernment (Design A)", f"estimate [{interval}]; strategy: {strategy}")
        .tab_source_note("Δ = |P1 − P2|, I = |P1 − T| − |C − T|. Propensities count ties in Δ as 1/2; "
                         "reliability pairs share strategy, item and factor, truth pairs share strategy, item and source. "
                         "CD = 1 − P(P2 ≠ P1 | P1 = T, C ≠ T)."))


def perception_frame(ctx: ReportContext) -> pd.DataFrame:
    m = ctx.metrics("l2d")
    m = m[(m.strategy == "Reliability") & m.metric.isin(["rho_rhat_R", "rho_delta_rhat"])]
    if m.empty:
        return pd.DataFrame(columns=["LLM", "ρ(R̂, R) perception", "ρ(Δ, R̂) execution"])
    lab = _llm_label(ctx)
    w = m.assign(cell=[_ci(e, lo, hi) for e, lo, hi in zip(m.estimate, m.lo, m.hi)]).pivot(
        index="llm", columns="metric", values="cell")
    w.index = [lab.get(i, i) for i in w.index]
    return w.rename(columns={"rho_rhat_R": "ρ(R̂, R) perception", "rho_delta_rhat": "ρ(Δ, R̂) execution"}
                    ).reset_index(names="LLM")


def perception_table(ctx: ReportContext) -> GT:
    return GT(perception_frame(ctx)).tab_header("Perception vs execution (Reliability strategy)",
                                                "R̂: the LLM's own 0–1 rating of the source; chance value 0")


CUE_EFFECTS = ["swap", "Q", "I", "R", "text_order", "event_time", "repetition", "speaker", "lineage"]
CUE_ACC = ["recognition", "recognition_HH", "recognition_LL", "count_single", "count_joint", "initial_state",
           "provenance", "verified", "valid_rate"]


def cue_profile_frame(ctx: ReportContext, intervention: str = "C0", stratum: str = "core",
                      kind: str = "effect_pp") -> pd.DataFrame:
    """Cue effects (``kind='effect_pp'``) or identification accuracies (``'accuracy_pct'``) per LLM."""
    m = ctx.metrics("cue")
    m = m[(m.intervention == intervention) & (m.stratum == stratum) & (m.kind == kind)]
    lab = _llm_label(ctx)
    cells = m.assign(cell=[_ci(e, lo, hi, 1) for e, lo, hi in zip(m.estimate, m.lo, m.hi)])
    w = cells.pivot(index="llm", columns="metric", values="cell")
    order = CUE_EFFECTS + ["order_at_08", "order_at_12", "swap_if_recognised"] if kind == "effect_pp" else CUE_ACC
    w = w[[c for c in order if c in w.columns]]
    w.index = [lab.get(i, i) for i in w.index]
    return w.reset_index(names="LLM")


def cue_profile_table(ctx: ReportContext, intervention: str = "C0", stratum: str = "core",
                      kind: str = "effect_pp") -> GT:
    m = ctx.metrics("cue")
    interval = m["interval"].iloc[0] if len(m) else ""
    what = "cue effects (pp)" if kind == "effect_pp" else "identification accuracies and valid rate (%)"
    t = GT(cue_profile_frame(ctx, intervention, stratum, kind)).tab_header(
        f"Cue profiles ({intervention}, {stratum}): {what}", interval)
    if kind == "effect_pp":
        t = t.tab_source_note("swap = LH − HL; Q = clear − limited; I = separate − shared roots; text order = "
                              "B-first − A-first; event time = B at 12:00 − B at 08:00; repetition, speaker and "
                              "lineage are successive contrasts; swap_if_recognised: worlds with both P3c probes "
                              "correct. Choice effects use valid pairs. Chance: 0 pp.")
    else:
        t = t.tab_source_note("Accuracies use the planned denominator (an invalid answer counts as wrong); "
                              "recognition = mean of HL and LH P3c accuracy. Chance: 50% (P1, verified), 25% "
                              "(P2, P3c), 11.1% (single count).")
    return t


def weights_frame(ctx: ReportContext) -> pd.DataFrame:
    """Recovered cue weights beside the synthetic profiles' true weights (where known)."""
    m = ctx.model("cue")
    if m is None:
        return pd.DataFrame()
    s = m.summary()
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


def weights_table(ctx: ReportContext) -> GT:
    s = weights_frame(ctx)
    if s.empty:
        return GT(pd.DataFrame({"note": [f"no saved cue-weight fit ({ctx.model_error('cue')})"]}))
    t = s[["llm", "intervention", "cue", "logit_mean", "logit_hdi_lo", "logit_hdi_hi", "true logit (simulator)",
           "inside 94% HDI", "pp_mean", "pp_hdi_lo", "pp_hdi_hi", "converged"]]
    return (GT(t).tab_header("Cue weights: recovered (posterior mean, 94% HDI) vs known truth",
                             "logit scale and average marginal effect in pp")
            .fmt_number(columns=["logit_mean", "logit_hdi_lo", "logit_hdi_hi", "true logit (simulator)"], decimals=2)
            .fmt_number(columns=["pp_mean", "pp_hdi_lo", "pp_hdi_hi"], decimals=1))


def contrasts_frame(ctx: ReportContext) -> pd.DataFrame:
    c = ctx.contrasts()
    if c.empty:
        return c
    out = c[["llm", "contrast", "endpoint", "scope", "estimate", "lo", "hi", "p_value", "p_holm", "reject"]].copy()
    m = ctx.model("intervention")
    if m is not None:
        b = m.summary()[["llm", "contrast", "endpoint", "scope", "posterior_mean", "hdi_lo", "hdi_hi"]]
        out = out.merge(b, on=["llm", "contrast", "endpoint", "scope"], how="left")
    return out


def contrasts_table(ctx: ReportContext) -> GT:
    c = contrasts_frame(ctx)
    if c.empty:
        return GT(pd.DataFrame({"note": ["no intervention arms collected"]}))
    num = [x for x in ("estimate", "lo", "hi", "posterior_mean", "hdi_lo", "hdi_hi") if x in c.columns]
    return (GT(c).tab_header("Pre-specified intervention contrasts",
                             f"pp; 95% paired whole-world bootstrap; Holm over a declared family of "
                             f"{len(c)}; Bayesian posterior mean and 94% HDI beside")
            .fmt_number(columns=num, decimals=1).fmt_number(columns=["p_value", "p_holm"], decimals=4))


def diagnostics_frame(ctx: ReportContext) -> pd.DataFrame:
    rows = []
    for kind in ("cue", "discernment", "intervention"):
        m = ctx.model(kind)
        if m is None:
            rows.append({"model": kind, "status": f"not available: {ctx.model_error(kind)}"})
            continue
        d = m.diagnostics
        rows.append({"model": kind, "status": "converged" if d["ok"] else "NOT CONVERGED: " + "; ".join(d["problems"]),
                     "max R-hat": d["max_rhat"], "min bulk ESS": d["min_ess_bulk"], "min tail ESS": d["min_ess_tail"],
                     "divergences": d["divergences"] if m.sampler.get("sampler") != "gibbs" else "n/a (Gibbs)",
                     "sampler": m.sampler.get("sampler"),
                     "min MH acceptance": ", ".join(f"{k} {v:.2f}" for k, v in m.sampler.get("acceptance", {}).items()),
                     "draws x chains": f"{m.sampler.get('draws')} x {m.sampler.get('chains')}",
                     "wall s": m.sampler.get("wall_s")})
    return pd.DataFrame(rows)


def diagnostics_table(ctx: ReportContext) -> GT:
    return (GT(diagnostics_frame(ctx)).tab_header("Convergence of the saved fits",
                                                  "thresholds: R-hat ≤ 1.01, bulk and tail ESS ≥ 400, 0 divergences")
            .fmt_number(columns=["max R-hat"], decimals=3).fmt_number(columns=["min bulk ESS", "min tail ESS", "wall s"],
                                                                     decimals=0))


def quality_frame(ctx: ReportContext) -> pd.DataFrame:
    log = ctx.db.trial_log()
    if log.empty:
        return pd.DataFrame()
    log["status"] = log["status"].fillna(log["state"])
    g = log.groupby(["design", "llm"])
    out = g["status"].value_counts().unstack(fill_value=0)
    out["trials"] = g.size()
    out["retries"] = g["n_attempts"].sum() - g.size()
    out["median latency ms"] = g["latency_ms"].median()
    out["tokens in"] = g["tokens_in"].sum()
    out["tokens out"] = g["tokens_out"].sum()
    return out.reset_index()


def quality_table(ctx: ReportContext) -> GT:
    return (GT(quality_frame(ctx)).tab_header("Data quality", "status per trial: ok, parse_failure, refusal, "
                                                             "api_error (failed after retries), imported")
            .fmt_number(columns=["median latency ms"], decimals=1))


def invalid_examples(ctx: ReportContext, n: int = 8) -> GT:
    log = ctx.db.trial_log()
    bad = log[log["valid"] == False]  # noqa: E712
    return GT(bad[["llm", "design", "probe", "status", "parse_error", "raw_response"]].head(n).reset_index(drop=True))
