"""Small interchange tables for the statistics and Bayesian tests, drawn here from a stated model,
so those tests need no planner, collector or synthetic respondent (a bug there does not fail them).

`cue_choices` gives Design B P4 rows in the interchange columns (`store.tables.CUE_COLUMNS` plus
``choice``), validated by `store.tables.validate_trials` as an imported file would be:
logit P(choose B) = intercept + sum_k w_k x_k + u_world, u_world ~ N(0, world_sd), the same
model as the synthetic profiles (``discern_stats/data/profiles.yaml``). The cue codes of each
condition are written out below from the design (+-0.5, seed 001 section 4), not taken from
`core.coding.cue_codes`, so a test comparing against them checks that coding too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from discern_stats.store.tables import validate_trials

# track -> [(condition label, {cue: code})]: the codes a respondent perceives in each condition
CONDITIONS: dict[str, list[tuple[str, dict[str, float]]]] = {
    "factorial": [(f"R{r}-Q{q}-I{i}", {"R": 0.5 if r == "HH" else -0.5, "Q": 0.5 if q == "clear" else -0.5,
                                       "I": 0.5 if i == "separate" else -0.5})
                  for r in ("HH", "LL") for q in ("clear", "limited") for i in ("separate", "shared")],
    "swap": [("HL", {"history": -0.5}), ("LH", {"history": 0.5})],
    "competition": [(f"order={o}-first,time={t}", {"order": 0.5 if o == "B" else -0.5,
                                                   "time": 0.5 if t == "12" else -0.5})
                    for o in "AB" for t in ("08", "12")]
                   + [(f"structure={s}", {"repetition": 0.5 if k >= 1 else -0.5, "speaker": 0.5 if k >= 2 else -0.5,
                                          "lineage": 0.5 if k >= 3 else -0.5})
                      for k, s in enumerate(("single", "repeated", "two-speakers", "separate-roots"))],
}

# the source-sensitive profile's Design B numbers (profiles.yaml), stated here
SOURCE_SENSITIVE = {"intercept": -0.2, "world_sd": 0.5,
                    "weights": {"history": 3.0, "R": 1.5, "Q": 1.2, "I": 1.8, "order": 0.1, "time": 2.0,
                                "repetition": 0.1, "speaker": 0.2, "lineage": 1.6}}


def cue_choices(weights: dict[str, float], *, intercept: float = 0.0, world_sd: float = 0.0, n_worlds: int = 120,
                tracks: tuple[str, ...] = ("factorial",), llm: str = "sim", intervention: str = "C0",
                seed: int = 0) -> pd.DataFrame:
    """P4 choices of one LLM under one intervention: every condition of ``tracks`` in each of
    ``n_worlds`` worlds (world effect shared by a world's rows), as a validated interchange table."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(n_worlds):
        u = rng.normal(0.0, world_sd)
        for track in tracks:
            for cond, x in CONDITIONS[track]:
                eta = intercept + sum(weights.get(k, 0.0) * v for k, v in x.items()) + u
                choice = "B" if rng.random() < 1.0 / (1.0 + np.exp(-eta)) else "A"
                rows.append(dict(llm=llm, intervention=intervention, world_id=f"w{w:03d}", stratum="core",
                                 track=track, probe="P4", condition=cond, answer=choice, valid=True, choice=choice))
    return validate_trials(pd.DataFrame(rows), "cue")


def l2d_reliability_moves(d: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Design A answers on planned posterior rows (``item_id`` "q<k>", ``reliability``, ``claim``):
    truth k + 10, one prior per item (the truth or 1.4 x it, rounded, each with probability 1/2),
    and a move toward the claim with probability 0.2 + 0.6 x reliability, by a Uniform(0.2, 1)
    fraction of the way; every row valid, LLM "m"."""
    rng = np.random.default_rng(seed)
    d = d.copy()
    d["llm"], d["truth"] = "m", d.item_id.str[1:].astype(float) + 10
    d["prior"] = np.where(rng.random(len(d)) < 0.5, d.truth, (d.truth * 1.4).round())
    d["prior"] = d.groupby("item_id").prior.transform("first")
    moves = rng.random(len(d)) < 0.2 + 0.6 * d.reliability
    d["posterior"] = d.prior + moves * rng.uniform(0.2, 1, len(d)) * (d.claim - d.prior)
    d["valid"] = True
    return d
