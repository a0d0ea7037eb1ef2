"""Coding of responses: the cues of a Design B P4 choice from its condition labels (never from
prompt text), and the `vocab.RESPONSES` category of a Design A posterior (`classify_response`).

Every cue is coded +0.5 / -0.5 (0 where it is not manipulated), oriented so that a positive
weight raises P(choose B) — the SPEC directions (seed 001 A.2):

- ``history`` (swap track): +0.5 LH (B's source has the better history), -0.5 HL
- ``R``, ``Q``, ``I`` (factorial): +0.5 for HH, clear, separate roots
- ``order``: +0.5 B-first, -0.5 A-first; ``time``: +0.5 B's report at 12:00, -0.5 at 08:00
- ``repetition``, ``speaker``, ``lineage`` (report structure, successive coding): each is +0.5
  from its step on (single < repeated < two-speakers < separate-roots), so a weight equals
  the successive contrast on the logit scale
- ``verified``: +0.5 verified=B, -0.5 verified=A

With this coding, a weight is the log-odds difference between the two levels of its cue.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .errors import InputError
from .vocab import CUES, STRUCTURE_STEPS, WEIGHT_TRACKS


def block_of(track: str, condition: str) -> str:
    """Sub-design a P4 request belongs to: factorial, swap, order-time, structure, verified."""
    if track == "competition":
        return "structure" if condition.startswith("structure=") else "order-time"
    return track


def cue_codes(track: str, condition: str) -> dict[str, float]:
    x = dict.fromkeys(CUES, 0.0)
    if track == "factorial":
        m = re.fullmatch(r"R(HH|LL)-Q(clear|limited)-I(separate|shared)", condition)
        if not m:
            raise InputError(f"bad factorial condition {condition!r}")
        x["R"] = 0.5 if m.group(1) == "HH" else -0.5
        x["Q"] = 0.5 if m.group(2) == "clear" else -0.5
        x["I"] = 0.5 if m.group(3) == "separate" else -0.5
    elif track == "swap":
        if condition not in ("HL", "LH"):
            raise InputError(f"bad swap condition {condition!r}")
        x["history"] = 0.5 if condition == "LH" else -0.5
    elif track == "competition":
        m = re.fullmatch(r"order=(A|B)-first,time=(08|12)", condition)
        if m:
            x["order"] = 0.5 if m.group(1) == "B" else -0.5
            x["time"] = 0.5 if m.group(2) == "12" else -0.5
        else:
            m = re.fullmatch(r"structure=(.+)", condition)
            if not m or m.group(1) not in STRUCTURE_STEPS:
                raise InputError(f"bad competition condition {condition!r}")
            step = STRUCTURE_STEPS.index(m.group(1))
            x["repetition"] = 0.5 if step >= 1 else -0.5
            x["speaker"] = 0.5 if step >= 2 else -0.5
            x["lineage"] = 0.5 if step >= 3 else -0.5
    elif track == "verified":
        if condition not in ("verified=A", "verified=B"):
            raise InputError(f"bad verified condition {condition!r}")
        x["verified"] = 0.5 if condition == "verified=B" else -0.5
    else:
        raise InputError(f"track {track!r} has no P4 choice")
    return x


def classify_response(prior, posterior, claim):
    """The `RESPONSES` category of each (prior, posterior, claim) with claim != prior (arrays or
    scalars). Equality is exact up to 1e-9 relative: numbers parsed from answers that repeat the
    prior or the claim digit for digit."""
    p1, p2, c = (np.asarray(v, float) for v in (prior, posterior, claim))
    f = (p2 - p1) / (c - p1)
    same = lambda a, b: np.isclose(a, b, rtol=1e-9, atol=0.0)  # noqa: E731
    return np.select([same(p2, p1), same(p2, c), (f > 0) & (f < 1)], ["none", "full", "partial"], "away")


def choice_table(df: pd.DataFrame, tracks: tuple[str, ...] = WEIGHT_TRACKS) -> pd.DataFrame:
    """Valid P4 choices with their block and cue codes (from the condition labels)."""
    d = df[(df["probe"] == "P4") & df["track"].isin(tracks) & df["valid"].astype(bool) & df["choice"].notna()]
    codes = pd.DataFrame([cue_codes(t, c) for t, c in zip(d["track"], d["condition"])], index=d.index)
    out = pd.concat([d[["llm", "intervention", "stratum", "world_id"]], codes], axis=1)
    out["block"] = [block_of(t, c) for t, c in zip(d["track"], d["condition"])]
    out["y"] = (d["choice"] == "B").astype(int)
    return out
