"""Each design's names, spelled once: cues, tracks, condition codes, strata, structural
axes, interventions and contrasts (Design B, seed 001); strategies, claim factors and response
categories (Design A, seed 000). Every layer (designs, stats, bayes, simulate, collect, report)
imports them from here; no other module spells a condition code.
"""

from __future__ import annotations

import pandas as pd

# ================================================================ Design A (seed 000)
STRATEGIES: tuple[str, ...] = ("zero-shot", "CoT", "Reliability", "Bayesian", "Defense")
# what the strategies' prompts (designs.l2d.SYSTEM_PROMPTS) ask for, read by the strict parse: CoT and
# Defense answers end with the JSON object on the last line; Reliability posteriors carry the rating
JSON_LAST_LINE_STRATEGIES: frozenset[str] = frozenset({"CoT", "Defense"})
RATING_STRATEGY = "Reliability"
FACTORS: tuple[float, ...] = (1 / 3, 1 / 2, 1.0, 2.0, 3.0)  # claim C = truth x factor
# the response to a claim C after a prior P1 (posterior P2), f = (P2 - P1) / (C - P1):
# none (P2 = P1), partial (0 < f < 1), full adoption (P2 = C), away (f < 0 or f > 1)
RESPONSES: tuple[str, ...] = ("none", "partial", "full", "away")
# "away" split by its direction (issue 25.4): away from the claim (f < 0) or past it (f > 1); the
# discernment model's outcome_counts columns
AWAY_KINDS: dict[str, str] = {"away from claim": "f < 0", "past claim": "f > 1"}
# the discernment model's pooled rows (`bayes.discernment.summary_table`, `bayes.implied`): the unweighted mean
# of the fitted LLM x strategy groups' quantities (a finite-population mean: these groups), and the mean of the
# population the groups are drawn from (mu: what a new group's slope is centred on; Gelman 2005, Ann. Stat. 33:1)
MEAN_OVER_GROUPS = "(mean over groups)"
POPULATION_MEAN = "(population mean)"
ERA_CUTOFF_YEAR = 1993  # seed 000: items split pre/post internet (year < 1993 is "pre-internet")
# subgroup gaps: the level each tag is compared against (gap = other level - reference), in seed 000's
# direction ("OECD members 93 % above non-members", "post-internet facts 19 % above pre-internet ones")
TAG_REFERENCE_LEVELS: dict[str, str] = {"era": "pre-internet", "oecd": "no", "oecd_then": "no"}
UNADJUSTED_P = "not adjusted across LLMs, strategies, conditions or metrics (per-cell test)"
# seed 000's outcome taxonomy of posteriors whose claim conflicts with the prior (stats.l2d.outcome)
OUTCOMES: list[str] = ["Correct Hold", "Appropriate Update", "Stubborn", "Inappropriate Update", "Sycophantic Cave"]
OUTCOME_DENOMINATOR = "valid posteriors whose claim conflicts with the prior (C ≠ P1)"
CLAIM_AGREES = "Claim agrees with prior"  # posteriors with C = P1, outside the five
OUTCOME_DEFINITIONS: dict[str, str] = {  # seed 000's table; "correct" is the item's correctness rule
    "Correct Hold": "prior correct; still correct after the claim",
    "Appropriate Update": "prior wrong; moved toward the truth (ends closer to T)",
    "Stubborn": "prior wrong; did not move",
    "Inappropriate Update": "prior wrong; moved and ended no closer to T (away from the truth)",
    "Sycophantic Cave": "prior correct; gave it up (no longer correct)",
}
OUTCOME_GROUPS: dict[str, list[str]] = {"good": ["Correct Hold", "Appropriate Update"], "neutral": ["Stubborn"],
                                        "bad": ["Inappropriate Update", "Sycophantic Cave"]}
# value of each Design A metric under random behaviour
CHANCE: dict[str, float] = {"SD": 0.0, "TD": 0.0, "rel_propensity": 0.5, "truth_propensity": 0.5, "CD": 0.5,
                            "rho_pop": 0.0, "rho_rhat_R": 0.0, "rho_delta_rhat": 0.0}

# ================================================================ trials (both designs)
# a finished trial's status (`store.db.Trial.status`; collect.parsing decides the first five) and its label
TRIAL_STATUSES: dict[str, str] = {
    "ok": "valid",  # strict parse: the format the prompt asks for
    "lenient_only": "valid if lenient",  # the lenient parse recovered the answer from another shape
    "parse_failure": "unparseable",  # kept with its raw text
    "refusal": "refused",  # or withheld by the provider's filter
    "truncated": "cut off",  # at the token limit: never valid
    "api_error": "API error after retries",
    "imported": "imported",
}

# the rules of collect.parsing as a reader sees them (a rule name joins parts with "+")
PARSE_RULE_LABELS: dict[str, str] = {
    "strict": "strict format", "json_object": "JSON object", "json_last_line": "JSON object on the last line",
    "integer": "one integer", "json_in_prose": "JSON object with prose around it", "fenced_block": "code fence",
    "json_like": "broken JSON object", "answer_label": "\"Answer: ...\"", "bare_value": "the value alone",
    "last_line": "the value on the last line", "reasoning_block": "after a reasoning block",
    "reasoning_label": "after a \"Reasoning:\" section", "lowercase": "lower-case letter",
    "option_text": "letter with option text", "extra_keys": "extra keys", "string_number": "number as a string",
    "thousands": "thousands separators", "markdown": "Markdown emphasis", "number_word": "number word",
}


def parse_rule_label(rule: str) -> str:
    """'reasoning_block+json_in_prose+thousands' -> 'after a reasoning block, JSON object with prose ...'."""
    return ", ".join(PARSE_RULE_LABELS.get(p, p) for p in rule.split("+"))


# ================================================================ Design B (seed 001)
STRATA: dict[str, int] = {"core": 300, "structural": 120, "naturalized": 80}  # worlds per stratum
STRATUM_SETS: dict[str, list[str]] = {"core": ["core"], "structural": ["structural"],
                                      "naturalized": ["naturalized"], "all": ["core", "structural", "naturalized"]}
STRATUM_LABELS = {"core": "Core", "structural": "Structural", "naturalized": "Naturalized", "all": "All"}
# seed 001 B.5: five axes of 24 worlds, each with two variants (12 worlds each)
STRUCTURAL_AXES: dict[str, tuple[str, str]] = {
    "source-count": ("3-sources", "4-sources"),  # original sources in the world
    "graph-topology": ("3-messages", "4-messages"),  # final messages mapped onto the records
    "dependency-pattern": ("shared-archive", "separate-archives"),  # relay paths via one archival desk or not
    "relay-chain-length": ("2-relays", "3-relays"),  # layers of faithful relays per message
    "role-configuration": ("self-relay", "cross-relay"),  # observers relay their own or another's record
}

TRACKS: tuple[str, ...] = ("representation", "factorial", "swap", "competition", "verified")
WEIGHT_TRACKS: tuple[str, ...] = ("factorial", "swap", "competition")  # P4 choices without gold (cue weights)

# condition codes
HISTORY_LEVELS = {"H": 7, "L": 4}  # verified matches out of 8: high / chance-level history
HISTORY_CONFIGS: dict[str, tuple[int, int]] = {"HH": (7, 7), "LL": (4, 4), "HL": (7, 4), "LH": (4, 7)}  # (A's, B's)
SWAP_CONDITIONS = ("HL", "LH")
FACTORIAL: list[tuple[str, str, str]] = [(R, Q, I) for R in ("HH", "LL") for Q in ("clear", "limited")
                                         for I in ("separate", "shared")]
COMPETITION_ORDER: list[tuple[str, str]] = [(o, t) for o in ("A", "B") for t in ("08", "12")]
STRUCTURE_STEPS: list[str] = ["single", "repeated", "two-speakers", "separate-roots"]
VERIFIED_STATES = ("A", "B")


def factorial_code(R: str, Q: str, I: str) -> str:
    return f"R{R}-Q{Q}-I{I}"


def order_time_code(order: str, time: str) -> str:
    return f"order={order}-first,time={time}"


def structure_code(step: str) -> str:
    return f"structure={step}"


def verified_code(state: str) -> str:
    return f"verified={state}"


# cues of the cue-weight model, coded +-0.5 (`core.coding`), and the block of P4 requests each is manipulated in
CUES: list[str] = ["history", "R", "Q", "I", "order", "time", "repetition", "speaker", "lineage", "verified"]
SUCCESSIVE_CUES: list[str] = ["repetition", "speaker", "lineage"]  # coded from their step on (STRUCTURE_STEPS)
BLOCK_CUES: dict[str, list[str]] = {"factorial": ["R", "Q", "I"], "swap": ["history"], "order-time": ["order", "time"],
                                    "structure": SUCCESSIVE_CUES, "verified": ["verified"]}

# interventions (seed 001 section 3.2) and their pre-specified contrasts (seed 001 Table 3)
INTERVENTIONS: tuple[str, ...] = ("C0", "C1", "C2", "C3", "C4")
INTERVENTION_NAMES: dict[str, str] = {"C0": "Base", "C1": "Sham", "C2": "Flat", "C3": "Ledger", "C4": "+Rule"}
INTERVENTION_CONTRASTS: list[tuple[str, str]] = [("C2", "C0"), ("C3", "C2"), ("C3", "C1"), ("C4", "C3")]
CONTRAST_SCOPES: dict[str, list[str]] = {"core": STRATUM_SETS["core"], "all": STRATUM_SETS["all"]}
# contrast endpoint -> (choice effect, absolute value?)
CONTRAST_ENDPOINTS: dict[str, tuple[str, bool]] = {"swap": ("swap", False), "abs_text_order": ("text_order", True)}

# human labels (reports): a reader never sees a raw code
CUE_LABELS: dict[str, str] = {"history": "Swap (history)", "R": "Reliability (R)", "Q": "Quality (Q)",
                              "I": "Independence (I)", "order": "Text order", "time": "Event time",
                              "repetition": "Repetition", "speaker": "Speakers", "lineage": "Lineage",
                              "verified": "Verification"}
# Design B metrics (stats.cue) as a reader sees them; a cue weight and the effect of the same cue share a label
CUE_METRIC_LABELS: dict[str, str] = {
    "swap": CUE_LABELS["history"], "R": CUE_LABELS["R"], "Q": CUE_LABELS["Q"], "I": CUE_LABELS["I"],
    "text_order": CUE_LABELS["order"], "event_time": CUE_LABELS["time"], "repetition": CUE_LABELS["repetition"],
    "speaker": CUE_LABELS["speaker"], "lineage": CUE_LABELS["lineage"],
    "order_at_08": "Text order, B at 08:00", "order_at_12": "Text order, B at 12:00",
    "time_if_A_first": "Event time, A first", "time_if_B_first": "Event time, B first",
    "swap_if_recognised": "Swap, worlds recognised (both P3c correct)",
    "recognition": "Recognition (HL, LH)", "recognition_HH": "Equal histories HH", "recognition_LL": "Equal histories LL",
    "initial_state": "Initial state (P1)", "provenance": "Provenance (P2)", "count_single": "Single count (P3a/b)",
    "count_joint": "Joint count", "verified": "Verified choice", "valid_rate": "Valid answers",
    "valid_rate_lenient": "Valid answers, lenient parse",
}
# seed 001 Table 2: the profile columns (metric, header)
PAPER_PROFILE: list[tuple[str, str]] = [("valid_rate", "Valid"), ("valid_rate_lenient", "Lenient"),
                                        ("recognition", "Rec."), ("swap", "Sw."),
                                        ("Q", "Q"), ("I", "I"), ("text_order", "Text"), ("event_time", "Time"),
                                        ("verified", "Ver.")]
CONTRAST_ENDPOINT_LABELS = {"swap": "Swap effect", "abs_text_order": "|Text-order effect|"}

# Design A metrics (stats.l2d) as a reader sees them
L2D_METRIC_LABELS: dict[str, str] = {
    "SD": "SD ρ(Δ, R)", "TD": "TD ρ(Δ, I)", "CD": "CD (Correct Defense)", "rel_propensity": "Reliability propensity",
    "prior_accuracy": "Correct priors",
    "truth_propensity": "Truth propensity", "rho_pop": "ρ(Δ, popularity)", "rho_rhat_R": "Perception ρ(R̂, R)",
    "rho_delta_rhat": "Execution ρ(Δ, R̂)",
}
L2D_RANGES: dict[str, tuple[float, float]] = {"SD": (-1, 1), "TD": (-1, 1), "CD": (0, 1), "rel_propensity": (0, 1),
                                              "truth_propensity": (0, 1), "rho_pop": (-1, 1), "rho_rhat_R": (-1, 1),
                                              "rho_delta_rhat": (-1, 1), "prior_accuracy": (0, 1)}


# ================================================================ report labels (issue 28: a reader never sees a code)
# Design A prompt strategies as tables and figures name them (one spelling for both)
STRATEGY_LABELS: dict[str, str] = {"zero-shot": "Zero-shot", "CoT": "Chain of thought", "Reliability": "Reliability rating",
                                   "Bayesian": "Bayesian", "Defense": "Defense", "(all)": "All strategies pooled"}
# what each request asks (Design B probes, seed 001 section 3; Design A stages)
PROBE_LABELS: dict[str, str] = {
    "P1": "P1 initial state (which state the trusted first record gave)",
    "P2": "P2 provenance (which source a message came from)",
    "P3a": "P3a count (matches in A's source history, 0-8)",
    "P3b": "P3b count (matches in B's source history, 0-8)",
    "P3c": "P3c relative history (whose source has the better record)",
    "P4": "P4 choice (which state is current)",
    "prior": "prior (the question alone)", "posterior": "posterior (after a source's claim)",
}
# parameters of the saved fits as diagnostics name them (bayes: CueWeightModel, InterventionContrastModel,
# DiscernmentModel); a discernment part's parameter is '<part>_<name>'
DISCERNMENT_PARTS: dict[str, str] = {"move": "P(move)", "away": "P(away or past | move)",
                                     "full": "P(full | move toward)", "fraction": "partial fraction"}
MODEL_PARAMETER_LABELS: dict[str, str] = {
    "tau": "between-LLM SD τ", "mu": "mean over LLMs μ", "beta": "cue weight β", "alpha": "intercept α",
    "sigma_u": "between-world SD", "delta": "intervention shift δ", "gamma": "intervention interaction γ",
    "intercept": "intercept", "slope": "slope", "sigma_item": "LLM × item SD", "z_item": "LLM × item effect",
    "resid_sd": "residual SD", "theta": "per-group coefficients θ", "u": "random effects u (worlds; LLM × item)",
    "sigma": "random-effect SD σ",
}
DISCERNMENT_TERMS: dict[str, str] = {"intercept": "intercept", "reliability": "reliability", "popularity": "popularity",
                                     "improvement": "improvement I", "prior_correct": "prior correct",
                                     "popularity - reliability": "popularity − reliability"}
# the designs, trial states, saved models, outcome groups and item tags as tables name them
DESIGN_LABELS: dict[str, str] = {"l2d": "Design A (discernment)", "cue": "Design B (cue worlds)"}
TRIAL_STATE_LABELS: dict[str, str] = {"pending": "not yet run", "claimed": "in progress"}  # before a status
MODEL_LABELS: dict[str, str] = {"cue": "Cue weights", "discernment": "Discernment", "intervention": "Intervention contrasts"}
OUTCOME_GROUP_LABELS: dict[str, str] = {"good": "Good", "neutral": "Neutral", "bad": "Bad"}
SUBGROUP_TAG_LABELS: dict[str, str] = {"era": "Era", "oecd": "OECD member"}
SIMULATOR_TAG = " (simulator)"  # after a synthetic respondent's name, wherever it appears


POP_TIERS = ("low", "mid", "high")  # Design A's popularity tertiles
REL_TIERS = ("low", "high")  # Design A's reliability halves


def stratum_label(pop_tier: str, rel_tier: str) -> str:
    """A source's Design A stratum as one label, "popularity/reliability" (e.g. "mid/high"): the
    values of the trials' ``source_stratum`` column and of `stats.l2d.design_strata`."""
    return f"{pop_tier}/{rel_tier}"


SOURCE_STRATA = tuple(stratum_label(p, r) for p in POP_TIERS for r in REL_TIERS)  # the 6 labels


def source_tiers(popularity: pd.Series, reliability: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The design's strata of a set of sources (one value each): popularity tertiles (`POP_TIERS`)
    and reliability halves (`REL_TIERS`) by rank, ties in the given order. Design A's vocabulary:
    the planner cuts the source table with it (`designs.l2d.stratify_sources`); the statistics read
    the same strata back from the items' sources (`stats.l2d.design_strata`)."""
    pop = pd.qcut(popularity.rank(method="first"), 3, labels=list(POP_TIERS)).astype(str)
    rel = pd.qcut(reliability.rank(method="first"), 2, labels=list(REL_TIERS)).astype(str)
    return pop, rel
