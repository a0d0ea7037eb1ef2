"""Request and trial keys: the natural keys that make planning and collection idempotent.

A request key names one planned stimulus by its design coordinates; a trial key hashes the LLM's
name and sampling settings with the request key and the repeat index, so re-running a plan never
duplicates a trial and a change of sampling settings is a new trial.
"""

from __future__ import annotations

import hashlib
from typing import Any

def stable_hash(*parts: Any, n: int = 24) -> str:
    h = hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode("utf-8"))
    return h.hexdigest()[:n]


def l2d_prior_key(item_id: str, strategy: str) -> str:
    return f"l2d|prior|{item_id}|{strategy}"


def l2d_posterior_key(item_id: str, strategy: str, source: str, factor: float) -> str:
    return f"l2d|post|{item_id}|{strategy}|{source}|{factor!r}"


def cue_request_key(world_id: str, intervention: str, track: str, probe: str, condition: str) -> str:
    return f"cue|{world_id}|{intervention}|{track}|{probe}|{condition}"


def trial_key(llm_name: str, llm_params_json: str, request_key: str, repeat: int) -> str:
    """Idempotency key: LLM id + sampling settings + request + repeat index (ANCHORS: caching)."""
    return stable_hash(llm_name, llm_params_json, request_key, repeat, n=40)
