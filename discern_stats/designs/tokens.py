"""Offline token counting for length matching (Sham vs Ledger, seed 001 A.7).

tiktoken's encodings are downloaded at first use, which these machines cannot do, so the
package uses a documented word-piece proxy: a text is split into words, numbers and single
punctuation marks (regex ``\\w+|[^\\w\\s]``) and every word is further split into pieces of
at most 4 characters, which approximates BPE counts of English prose (about 1.3 tokens per
word). If tiktoken's ``cl100k_base`` encoding is available offline it is used instead.
"""

from __future__ import annotations

import functools
import math
import re

_TOKEN_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def wordpiece_count(text: str) -> int:
    """Word-piece proxy token count (see module docstring)."""
    return sum(math.ceil(len(t) / 4) if t[0].isalnum() or t[0] == "_" else 1 for t in _TOKEN_RE.findall(text))


@functools.lru_cache(maxsize=1)
def _tiktoken_encoder():  # pragma: no cover - depends on a local cache
    try:
        import os
        if not os.environ.get("TIKTOKEN_CACHE_DIR"):
            return None
        import tiktoken
        return tiktoken.get_encoding("cl100k_base")
    except Exception:
        return None


def count_tokens(text: str) -> int:
    enc = _tiktoken_encoder()
    if enc is not None:  # pragma: no cover
        return len(enc.encode(text))
    return wordpiece_count(text)


def tokenizer_name() -> str:
    return "tiktoken cl100k_base" if _tiktoken_encoder() is not None else "word-piece proxy (\\w+ split into <=4-char pieces)"
