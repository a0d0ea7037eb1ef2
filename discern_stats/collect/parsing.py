"""Output parsing per SPEC: JSON {"answer": letter}, one integer 0..8, a number (Design A).

Parsers never repair an answer into validity: they return ``ParsedAnswer(valid=False,
error=...)`` and the raw text is stored beside it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..core.errors import InputError

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


@dataclass
class ParsedAnswer:
    valid: bool
    answer: str | None = None
    value: float | None = None
    rated_reliability: float | None = None
    error: str | None = None


def _strip(text: str) -> str:
    t = (text or "").strip()
    m = _FENCE.match(t)
    return m.group(1).strip() if m else t


def _last_json_object(text: str) -> dict | None:
    t = _strip(text)
    try:
        obj = json.loads(t)
        return obj if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        pass
    # CoT answers end with the JSON object on the last line
    last = t.strip().splitlines()[-1].strip() if t.strip() else ""
    try:
        obj = json.loads(last)
        return obj if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        return None


def parse_letter(text: str, letters: str = "ABCD") -> ParsedAnswer:
    obj = _last_json_object(text)
    if obj is None:
        return ParsedAnswer(False, error="not a JSON object")
    if set(obj) != {"answer"}:
        return ParsedAnswer(False, error=f"JSON keys {sorted(obj)} are not exactly ['answer']")
    a = obj["answer"]
    if not isinstance(a, str) or a.strip().upper() not in letters or len(a.strip()) != 1:
        return ParsedAnswer(False, error=f"answer {a!r} is not one of the option letters {letters}")
    return ParsedAnswer(True, answer=a.strip().upper())


def parse_integer(text: str, lo: int = 0, hi: int = 8) -> ParsedAnswer:
    t = _strip(text)
    if not re.fullmatch(r"[-+]?\d+", t):
        return ParsedAnswer(False, error="not exactly one integer")
    v = int(t)
    if not lo <= v <= hi:
        return ParsedAnswer(False, error=f"integer {v} outside {lo}..{hi}")
    return ParsedAnswer(True, answer=str(v), value=float(v))


def _as_number(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        s = v.strip().replace(",", "")
        if _NUMBER.match(s):
            return float(s)
    return None


def parse_number(text: str, *, want_reliability: bool = False) -> ParsedAnswer:
    """Design A answer: JSON {"answer": number} (and {"reliability": 0..1} when asked)."""
    obj = _last_json_object(text)
    if obj is None:
        return ParsedAnswer(False, error="not a JSON object")
    if "answer" not in obj:
        return ParsedAnswer(False, error="JSON object has no 'answer'")
    v = _as_number(obj["answer"])
    if v is None or v != v or v in (float("inf"), float("-inf")):
        return ParsedAnswer(False, error=f"answer {obj['answer']!r} is not a finite number")
    rr = None
    if want_reliability:
        rr = _as_number(obj.get("reliability"))
        if rr is None or not 0 <= rr <= 1:
            return ParsedAnswer(False, value=v, answer=repr(v),
                                error=f"reliability {obj.get('reliability')!r} is not a number in [0, 1]")
    return ParsedAnswer(True, answer=repr(v), value=v, rated_reliability=rr)


REFUSAL = re.compile(r"\b(I can(no|')t|I am unable|I'm unable|I won't|cannot help)\b", re.I)


def parse(answer_format: str, text: str, *, want_reliability: bool = False) -> ParsedAnswer:
    if answer_format == "letter":
        return parse_letter(text)
    if answer_format == "integer":
        return parse_integer(text)
    if answer_format == "number":
        return parse_number(text, want_reliability=want_reliability)
    raise InputError(f"unknown answer format {answer_format!r}")


def failure_status(text: str) -> str:
    """'refusal' when the text reads like one, else 'parse_failure'."""
    return "refusal" if REFUSAL.search(text or "") else "parse_failure"
