"""Design B metrics (seed 001 A.2 "Direction", "Intervals").

Choice effects are percentage-point differences in P(choose B) over *valid pairs*: matched
requests of one world that differ only in the target cue, both answered validly. With
d = 1[B | c1] - 1[B | c0] for each valid pair, effect = 100 * sum(d) / (#valid pairs), the
sums taken over worlds. Directions (SPEC): swap = LH - HL; Q = clear - limited; I =
separate - shared; R = HH - LL (factorial effects pool the valid pairs of the 2 x 2 other
cells); repetition = repeated - single, speaker = two-speakers - repeated, lineage =
separate-roots - two-speakers.
Text order (B-first - A-first) and event time (B-at-12:00 - B-at-08:00) are *averages of
conditional effects* (seed 001 A.2): text order = (order_at_08 + order_at_12) / 2, each a
valid-pair effect at one event time; event time = (time_if_A_first + time_if_B_first) / 2.
Pooling the pairs instead would weight the conditions by their valid-pair counts (up to 1.5 pp
off when invalid rates differ by condition). The conditional effects are in the table too.
Accuracies (recognition, counts, P1, P2, verified) use the planned denominator: an invalid
answer counts as wrong. Recognition = mean of HL and LH P3c accuracy.

Intervals: whole-world cluster bootstrap (`stats.bootstrap`); every effect of one LLM,
intervention and stratum set uses one resample matrix; intervention contrasts resample the
same worlds in both conditions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..core.vocab import (CONTRAST_ENDPOINTS, FACTORIAL, INTERVENTION_CONTRASTS, STRATUM_SETS, factorial_code,
                          order_time_code, structure_code, verified_code)
from .bootstrap import DEFAULT_RESAMPLES, jackknife_ratio, ratio, resample_counts, summarise


def _fc(R, Q, I):  # noqa: ANN001
    return ("factorial", factorial_code(R, Q, I))


def _oc(o, t):  # noqa: ANN001
    return ("competition", order_time_code(o, t))


def _sc(s):  # noqa: ANN001
    return ("competition", structure_code(s))


# effect -> list of (condition c1, condition c0) pairs, each (track, condition)
EFFECT_PAIRS: dict[str, list[tuple[tuple[str, str], tuple[str, str]]]] = {
    "swap": [(("swap", "LH"), ("swap", "HL"))],
    "R": [(_fc("HH", q, i), _fc("LL", q, i)) for q in ("clear", "limited") for i in ("separate", "shared")],
    "Q": [(_fc(r, "clear", i), _fc(r, "limited", i)) for r in ("HH", "LL") for i in ("separate", "shared")],
    "I": [(_fc(r, q, "separate"), _fc(r, q, "shared")) for r in ("HH", "LL") for q in ("clear", "limited")],
    "order_at_08": [(_oc("B", "08"), _oc("A", "08"))],
    "order_at_12": [(_oc("B", "12"), _oc("A", "12"))],
    "time_if_A_first": [(_oc("A", "12"), _oc("A", "08"))],
    "time_if_B_first": [(_oc("B", "12"), _oc("B", "08"))],
    "repetition": [(_sc("repeated"), _sc("single"))],
    "speaker": [(_sc("two-speakers"), _sc("repeated"))],
    "lineage": [(_sc("separate-roots"), _sc("two-speakers"))],
}
# effect -> the conditional effects (names in EFFECT_PAIRS) whose equally weighted mean it is
AVERAGED_EFFECTS: dict[str, tuple[str, ...]] = {"text_order": ("order_at_08", "order_at_12"),
                                                "event_time": ("time_if_A_first", "time_if_B_first")}
ACCURACIES: dict[str, list[tuple[str, str, str]]] = {  # name -> list of (track, probe, condition)
    "recognition": [("representation", "P3c", "HL"), ("representation", "P3c", "LH")],
    "recognition_HH": [("representation", "P3c", "HH")],
    "recognition_LL": [("representation", "P3c", "LL")],
    "initial_state": [("representation", "P1", factorial_code(*f)) for f in FACTORIAL],
    "provenance": [("representation", "P2", factorial_code(*f)) for f in FACTORIAL],
    "count_single": [("representation", p, h) for p in ("P3a", "P3b") for h in ("HH", "LL", "HL", "LH")],
    "verified": [("verified", "P4", verified_code("A")), ("verified", "P4", verified_code("B"))],
}


def world_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (llm, intervention, stratum, world_id); columns per (track, probe, condition):
    chose-B for unverified P4 choices (NaN if invalid), correct for probes and verified
    choices (0 if invalid: planned denominator)."""
    d = df.copy()
    d["valid"] = d["valid"].astype(bool)
    is_choice = (d["probe"] == "P4") & (d["track"] != "verified")  # verified P4s are scored by accuracy
    chose_b = np.where(d["valid"] & d["choice"].notna(), (d["choice"] == "B").astype(float), np.nan)
    correct = d["correct"] if "correct" in d.columns else pd.Series(False, index=d.index)
    scored = np.where(d["valid"], correct.fillna(False).astype(float), 0.0)
    d["y"] = np.where(is_choice, chose_b, scored)
    d["col"] = list(zip(d["track"], d["probe"], d["condition"]))
    # mean over repeats; NaN (invalid P4) is skipped, so a cell is NaN only if no repeat is valid
    wide = d.groupby(["llm", "intervention", "stratum", "world_id", "col"], sort=True)["y"].mean().unstack("col")
    return wide


def _pair_sums(wide: pd.DataFrame, pairs) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    num = np.zeros(len(wide))
    den = np.zeros(len(wide))
    for (t1, c1), (t0, c0) in pairs:
        k1, k0 = (t1, "P4", c1), (t0, "P4", c0)
        if k1 not in wide.columns or k0 not in wide.columns:
            continue
        a, b = wide[k1].to_numpy(float), wide[k0].to_numpy(float)
        ok = np.isfinite(a) & np.isfinite(b)
        num += np.where(ok, a - b, 0.0)
        den += ok
    return num, den


def _acc_sums(wide: pd.DataFrame, cells) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    num = np.zeros(len(wide))
    den = np.zeros(len(wide))
    for k in cells:
        if k in wide.columns:
            v = wide[k].to_numpy(float)
            planned = ~np.isnan(v)
            num += np.where(planned, v, 0.0)
            den += planned
    return num, den


def _joint_count(wide: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    num = np.zeros(len(wide))
    den = np.zeros(len(wide))
    for h in ("HH", "LL", "HL", "LH"):
        ka, kb = ("representation", "P3a", h), ("representation", "P3b", h)
        if ka in wide.columns and kb in wide.columns:
            a, b = wide[ka].to_numpy(float), wide[kb].to_numpy(float)
            ok = ~np.isnan(a) & ~np.isnan(b)
            num += np.where(ok, (a == 1) & (b == 1), 0.0)
            den += ok
    return num, den


def effect_sums(wide: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """name -> (per-world numerator, per-world denominator, kind) for every Design B measure."""
    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    for name, pairs in EFFECT_PAIRS.items():
        n, d = _pair_sums(wide, pairs)
        out[name] = (n, d, "effect_pp")
    for name, cells in ACCURACIES.items():
        n, d = _acc_sums(wide, cells)
        out[name] = (n, d, "accuracy_pct")
    n, d = _joint_count(wide)
    out["count_joint"] = (n, d, "accuracy_pct")
    # dissociation: swap effect among worlds with both P3c (HL, LH) correct
    k1, k2 = ("representation", "P3c", "HL"), ("representation", "P3c", "LH")
    if k1 in wide.columns and k2 in wide.columns:
        both = (wide[k1].to_numpy(float) == 1) & (wide[k2].to_numpy(float) == 1)
        n, d = out["swap"][0], out["swap"][1]
        out["swap_if_recognised"] = (np.where(both, n, 0.0), np.where(both, d, 0.0), "effect_pp")
    return out


def effect_values(sums: dict[str, tuple[np.ndarray, np.ndarray, str]], W: np.ndarray | None,
                  with_jack: bool = False) -> dict[str, tuple[float, np.ndarray | None, np.ndarray | None, int, str]]:
    """name -> (estimate, bootstrap values, jackknife values, n, kind) in % / pp for every measure of
    `effect_sums`, plus the averaged effects (`AVERAGED_EFFECTS`): the mean of their conditional
    effects' estimates, and of their bootstrap and jackknife values (same resamples), with n the
    valid pairs of all components. A measure with no valid pair is left out; an averaged effect
    needs every component."""
    out: dict[str, tuple] = {}
    for name, (num, den, kind) in sums.items():
        if den.sum() == 0:
            continue
        boot = 100 * ratio(W, num, den) if W is not None else None
        jack = 100 * jackknife_ratio(num, den) if W is not None and with_jack else None
        out[name] = (100 * num.sum() / den.sum(), boot, jack, int(den.sum()), kind)
    for name, parts in AVERAGED_EFFECTS.items():
        if not all(p in out for p in parts):
            continue
        vals = [out[p] for p in parts]
        mean = (lambda i: None if vals[0][i] is None else sum(v[i] for v in vals) / len(vals))  # noqa: E731
        out[name] = (mean(0), mean(1), mean(2), sum(v[3] for v in vals), "effect_pp")
    return out


def cue_metrics(df: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, level: float = 0.95,
                method: str = "percentile", strata: tuple[str, ...] = ("core", "structural", "naturalized", "all")
                ) -> pd.DataFrame:
    """Design B metric table per LLM x intervention x stratum set, in percent / percentage points."""
    if method not in ("percentile", "bca"):
        from ..core.errors import InputError
        raise InputError(f"unknown interval method {method!r} for Design B; use one of: percentile, bca")
    bad = [s for s in strata if s not in STRATUM_SETS]
    if bad:
        from ..core.errors import InputError
        raise InputError(f"unknown stratum set {bad[0]!r}; use one of: {', '.join(STRATUM_SETS)}")
    wide = world_table(df)
    # valid answers by the headline (strict) parse, and by the lenient parse beside it where the table has it
    rate_cols = {"valid_rate": "valid"}
    if "lenient_valid" in df.columns:
        rate_cols["valid_rate_lenient"] = "lenient_valid"
    valid_rates = {m: df.assign(_v=df[c].fillna(False).astype(bool)).groupby(["llm", "intervention", "stratum"])["_v"]
                   .agg(["sum", "count"]) for m, c in rate_cols.items()}
    rows = []
    for (llm, iv), g in wide.groupby(level=["llm", "intervention"], sort=True):
        for sset in strata:
            gs = g[g.index.get_level_values("stratum").isin(STRATUM_SETS[sset])]
            if gs.empty:
                continue
            W = resample_counts(len(gs), n_resamples, seed) if n_resamples and len(gs) > 1 else None
            base = {"llm": llm, "intervention": iv, "stratum": sset, "n_worlds": len(gs)}
            for metric, rates in valid_rates.items():
                vr = rates.loc[[(llm, iv, s) for s in STRATUM_SETS[sset] if (llm, iv, s) in rates.index]].sum()
                rows.append({**base, "metric": metric, "kind": "accuracy_pct",
                             "estimate": 100 * vr["sum"] / vr["count"], "lo": np.nan, "hi": np.nan, "p_value": np.nan,
                             "n": int(vr["count"])})
            sums = effect_sums(gs)
            for name, (est, boot, jack, n, kind) in effect_values(sums, W, with_jack=method == "bca").items():
                r = {**base, "metric": name, "kind": kind, "estimate": est, "lo": np.nan, "hi": np.nan,
                     "p_value": np.nan, "n": n}
                if boot is not None:
                    ivl = summarise(est, boot, jack, method=method, level=level)
                    r.update(lo=ivl.lo, hi=ivl.hi, p_value=ivl.p_value if kind == "effect_pp" else np.nan)
                rows.append(r)
    out = pd.DataFrame(rows)
    out["interval"] = (f"{level:.0%} {method} whole-world bootstrap ({n_resamples:,} resamples)" if n_resamples
                       else "no interval (0 resamples)")
    out["denominator"] = np.where(out["kind"] == "effect_pp", "valid pairs (both requests of a pair valid)",
                                  "planned requests (an invalid answer counts as wrong)")
    out.loc[out["metric"].isin(["valid_rate", "valid_rate_lenient"]), "denominator"] = "all trials"
    return out


CONTRASTS = INTERVENTION_CONTRASTS
ENDPOINTS = CONTRAST_ENDPOINTS


def abs_contrast_p_value(est1: float, est0: float, boot1: np.ndarray, boot0: np.ndarray) -> float:
    """Two-sided p-value of H0: |theta_1| = |theta_0| from paired bootstrap values of the signed
    effects: a Wald test of the bias-corrected difference of squares. No longer what the contrast
    table prints (that is `abs_contrast_test`, more powerful where one arm is 0 and with an interval
    that agrees with it); kept as the comparison of benchmarks/size_power_abs_order.py.

    H0 is composite: it holds at every common size c = |theta_1| = |theta_0|, and the law of
    |theta_hat_1| - |theta_hat_0| depends on c (near c = 0 it is a difference of folded normals,
    far from 0 an ordinary difference). The percentile inversion of |theta*_1| - |theta*_0| used
    for signed contrasts has size 0.005 at c = 0; plugging an estimate of c into a null bootstrap
    gives the right size at c = 0 but 0.20 at c = 2 SE (benchmarks/size_cue.py). Here, with
    e_k = theta_hat_k - theta_k jointly normal with (co)variances v_1, v_0, v_10 (from the bootstrap):
    T = theta_hat_1^2 - theta_hat_0^2 - (v_1 - v_0) has mean theta_1^2 - theta_0^2 (0 under H0) and
    variance V = 4 theta_1^2 v_1 + 4 theta_0^2 v_0 - 8 theta_1 theta_0 v_10 + 2 v_1^2 + 2 v_0^2 - 4 v_10^2.
    The bootstrap variance of theta*_1^2 - theta*_0^2 has expectation V + 4 (v_1^2 + v_0^2 - 2 v_10^2), so
    V_hat = that variance minus 4 (v_1^2 + v_0^2 - 2 v_10^2), at least 2 v_1^2 + 2 v_0^2 - 4 v_10^2.
    p = 2 Phi(-|T| / sqrt(V_hat)). Size: 0.05 when the order effects are large, below 0.05 in between,
    and near 0 when both are 0: no test of this composite null can hold 5 % at c = 0 without
    exceeding it for small c > 0, and we keep the level everywhere.
    """
    ok = np.isfinite(boot1) & np.isfinite(boot0)
    b1, b0 = boot1[ok], boot0[ok]
    if b1.size < 2 or not (np.isfinite(est1) and np.isfinite(est0)):
        return np.nan
    d1, d0 = b1 - est1, b0 - est0
    v1, v0, v10 = np.mean(d1 * d1), np.mean(d0 * d0), np.mean(d1 * d0)
    t = est1 ** 2 - est0 ** 2 - (v1 - v0)
    floor = 2 * v1 ** 2 + 2 * v0 ** 2 - 4 * v10 ** 2
    var = max(np.var(b1 ** 2 - b0 ** 2) - 4 * (v1 ** 2 + v0 ** 2 - 2 * v10 ** 2), floor)
    if var <= 0:  # no bootstrap variation at all (e.g. every world the same): no evidence, or the floor 1/(B+1)
        return 1.0 if abs(t) < 1e-12 else 1.0 / (b1.size + 1)
    return float(2 * sps.norm.sf(abs(t) / np.sqrt(var)))


def percentile_inversion_interval(boot: np.ndarray, alpha: float) -> tuple[float, float]:
    """The set of theta_0 that `bootstrap.boot_p_value` does not reject at ``alpha``, exactly:
    p(theta_0) = min(1, 2 min(#(b <= theta_0) + 1, #(b >= theta_0) + 1) / (B + 1)) >= alpha holds iff
    #(b <= theta_0) >= k and #(b >= theta_0) >= k with k = ceil(alpha (B + 1) / 2) - 1, i.e.
    b_(k) <= theta_0 <= b_(B - k + 1) (order statistics, 1-based). k <= 0: the whole line."""
    b = np.sort(boot[np.isfinite(boot)])
    k = int(np.ceil(alpha * (b.size + 1) / 2 - 1e-12)) - 1
    if b.size == 0 or k <= 0:
        return -np.inf, np.inf
    return float(b[k - 1]), float(b[b.size - k])


def _abs_difference(d: np.ndarray, s: np.ndarray) -> np.ndarray:
    """|theta_1| - |theta_0| from d = theta_1 - theta_0 and s = theta_1 + theta_0: sign(d s) min(|d|, |s|)."""
    return np.sign(d * s) * np.minimum(np.abs(d), np.abs(s))


def abs_contrast_test(est1: float, est0: float, boot1: np.ndarray, boot0: np.ndarray, *, level: float = 0.95
                      ) -> dict[str, float]:
    """Intersection-union test of H0: |theta_1| = |theta_0| and the interval of |theta_1| - |theta_0|
    inverted from it (seed 001's absolute text-order contrast; issue 24.4).

    |theta_1| = |theta_0| iff (theta_1 - theta_0)(theta_1 + theta_0) = 0, so H0 is the union of
    H_d: d = theta_1 - theta_0 = 0 and H_s: s = theta_1 + theta_0 = 0. An intersection-union test
    (Berger 1982) rejects the union when it rejects each part at alpha:
    p = max(p_d, p_s), each the paired-bootstrap p-value of `bootstrap.boot_p_value` (the
    percentile inversion) of d* = theta*_1 - theta*_0 and s* = theta*_1 + theta*_0 (same worlds in
    both arms). Its size is at most alpha at every point of H0 (0 / 0, equal, sign-flipped).

    Interval: with I_d and I_s the exact inversions of those two tests (`percentile_inversion_interval`),
    the range of |theta_1| - |theta_0| = sign(d s) min(|d|, |s|) over d in I_d, s in I_s (a
    piecewise-linear function, so its extremes lie at the rectangle's corners or where an edge
    crosses d = 0, s = 0 or d = +-s). It holds 0 exactly when I_d or I_s holds 0, i.e. exactly when
    p >= alpha: the interval excludes 0 iff the test rejects.
    """
    ok = np.isfinite(boot1) & np.isfinite(boot0)
    b1, b0 = boot1[ok], boot0[ok]
    est = abs(est1) - abs(est0) if np.isfinite(est1) and np.isfinite(est0) else np.nan
    if b1.size < 2 or not np.isfinite(est):
        return {"estimate": est, "lo": np.nan, "hi": np.nan, "p_value": np.nan}
    from .bootstrap import boot_p_value
    alpha = 1 - level
    p = max(boot_p_value(b1 - b0), boot_p_value(b1 + b0))
    lo, hi = _abs_difference_range(percentile_inversion_interval(b1 - b0, alpha),
                                   percentile_inversion_interval(b1 + b0, alpha))
    return {"estimate": float(est), "lo": lo, "hi": hi, "p_value": float(p)}


def _abs_difference_range(d_iv: tuple[float, float], s_iv: tuple[float, float]) -> tuple[float, float]:
    """min and max of sign(d s) min(|d|, |s|) over d in ``d_iv``, s in ``s_iv``: the function is
    linear between the lines d = 0, s = 0, d = s, d = -s, so its extremes lie at the rectangle's
    corners, where an edge crosses one of those lines, or at the origin. Unbounded: the whole line."""
    (dl, dh), (sl, sh) = d_iv, s_iv
    if not (np.isfinite(dl) and np.isfinite(sl)):
        return -np.inf, np.inf
    pts = [(d, s) for d in (dl, dh) for s in (sl, sh)]
    pts += [(d, s) for d in (dl, dh) for s in (0.0, d, -d) if sl <= s <= sh]  # edges at fixed d
    pts += [(d, s) for s in (sl, sh) for d in (0.0, s, -s) if dl <= d <= dh]  # edges at fixed s
    if dl <= 0 <= dh and sl <= 0 <= sh:
        pts.append((0.0, 0.0))
    vals = _abs_difference(np.array([q[0] for q in pts]), np.array([q[1] for q in pts]))
    return float(vals.min()), float(vals.max())


def intervention_contrasts(df: pd.DataFrame, *, contrasts=CONTRASTS, endpoints=("swap", "abs_text_order"),  # noqa: ANN001
                           scopes=("core", "all"), n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                           level: float = 0.95) -> pd.DataFrame:
    """Pre-specified intervention contrasts (seed 001 section 3.2): for each LLM, contrast
    (e.g. C2 - C0), endpoint (signed swap effect; absolute text-order effect, the order effect
    averaged over event times) and scope, the difference in pp with a paired whole-world
    bootstrap (same worlds in both arms). Signed endpoints: percentile interval and its p-value
    (`bootstrap.boot_p_value`). Absolute endpoints: the intersection-union test of
    |theta_1| = |theta_0| and the interval inverted from it (`abs_contrast_test`; chosen over the
    Wald test of squares, `abs_contrast_p_value`, by benchmarks/size_power_abs_order.py), so
    the interval excludes 0 exactly when p < 1 - level."""
    wide = world_table(df)
    rows = []
    for llm in sorted(wide.index.get_level_values("llm").unique()):
        for scope in scopes:
            sub = wide.xs(llm, level="llm")
            sub = sub[sub.index.get_level_values("stratum").isin(STRATUM_SETS[scope])]
            by_iv = {iv: g.droplevel(["intervention", "stratum"]) for iv, g in sub.groupby(level="intervention")}
            for c1, c0 in contrasts:
                if c1 not in by_iv or c0 not in by_iv:
                    continue
                worlds = by_iv[c1].index.intersection(by_iv[c0].index)
                W = resample_counts(len(worlds), n_resamples, seed)
                arms = [effect_values(effect_sums(by_iv[c].loc[worlds]), W) for c in (c1, c0)]
                for ep in endpoints:
                    eff, absolute = ENDPOINTS[ep]
                    if eff not in arms[0] or eff not in arms[1]:
                        continue
                    (e1, b1, *_), (e0, b0, *_) = arms[0][eff], arms[1][eff]
                    if absolute:
                        t = abs_contrast_test(e1, e0, b1, b0, level=level)
                        est, lo, hi, p = t["estimate"], t["lo"], t["hi"], t["p_value"]
                    else:
                        est = e1 - e0
                        ivl = summarise(est, b1 - b0, level=level)
                        lo, hi, p = ivl.lo, ivl.hi, ivl.p_value
                    rows.append({"llm": llm, "contrast": f"{c1}-{c0}", "endpoint": ep, "scope": scope,
                                 "estimate": est, "lo": lo, "hi": hi, "p_value": p,
                                 "n_worlds": len(worlds), "arm1": abs(e1) if absolute else e1,
                                 "arm0": abs(e0) if absolute else e0, "n_resamples": n_resamples})
    return pd.DataFrame(rows)


def intervention_family(llms: list[str], contrasts=CONTRASTS, endpoints=("swap", "abs_text_order"),  # noqa: ANN001
                        scopes=("core", "all")) -> list[tuple[str, str, str, str]]:
    """The declared family: LLMs x contrasts x endpoints x scopes (48 tests for 3 LLMs)."""
    return [(m, f"{a}-{b}", e, s) for m, (a, b), e, s in itertools.product(llms, contrasts, endpoints, scopes)]


CONTRAST_KEYS = ["llm", "contrast", "endpoint", "scope"]


def family_llms(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the LLMs the contrast family covers, the baseline-only LLMs left out of it).

    What the data was planned for: seed 001 runs every LLM at the baseline C0 and some of them
    through all interventions C0..C4. The family covers the LLMs collected under every intervention
    present in the data (all five for the paper's design). An LLM collected beyond the baseline but
    not under every intervention is an incomplete plan, not a smaller one: `InputError` (a silent
    shrink of the family would make Holm too lenient). LLMs with the baseline only are left out.
    """
    from ..core.errors import InputError
    present = sorted(df["intervention"].unique())
    by_llm = df.groupby("llm", sort=True)["intervention"].agg(lambda s: set(s.unique()))
    base = INTERVENTION_CONTRASTS[0][1] if INTERVENTION_CONTRASTS else "C0"
    covered = [m for m, ivs in by_llm.items() if ivs >= set(present)]
    partial = {m: ivs for m, ivs in by_llm.items() if m not in covered and ivs - {base}}
    if partial:
        m, ivs = next(iter(partial.items()))
        raise InputError(f"LLM {m!r} was collected under {', '.join(sorted(ivs))} but not "
                         f"{', '.join(sorted(set(present) - ivs))}; the contrast family covers the LLMs with every "
                         f"intervention in the data ({', '.join(present)}): collect the rest or leave {m!r} out")
    return covered, [m for m in by_llm.index if m not in covered]


def holm_contrasts(df: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                   alpha: float = 0.05) -> pd.DataFrame:
    """Intervention contrasts with Holm-adjusted p-values over the declared family.

    The family is declared from what the data was planned for, before any result: the LLMs
    collected under every intervention in the data (`family_llms`; seed 001: the 3 LLMs run
    through C0..C4, not the 10 run at C0 only) x the pre-specified contrasts whose two arms were
    collected x both endpoints x Core/All (48 tests for 3 LLMs with C0..C4). A declared test
    without a result (e.g. no Core world in one arm) is refused. Columns ``family_llms`` (the
    LLMs covered) and ``left_out_llms`` (baseline-only LLMs) say which LLMs the correction spans.
    """
    from .holm import holm
    present = set(df["intervention"].unique())
    contrasts = [c for c in CONTRASTS if set(c) <= present]
    if not contrasts:
        from ..core.errors import InputError
        raise InputError("no pre-specified intervention contrast has both arms in the data (collect C0..C4)")
    covered, left_out = family_llms(df)
    con = intervention_contrasts(df[df["llm"].isin(covered)], contrasts=contrasts, n_resamples=n_resamples, seed=seed)
    fam = intervention_family(covered, contrasts=contrasts)
    res = holm(con, fam, CONTRAST_KEYS, alpha=alpha)
    res["family_llms"] = ", ".join(covered)
    res["left_out_llms"] = ", ".join(left_out)
    return res
