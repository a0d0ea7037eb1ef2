"""Output parsing: a strict and a lenient parse of every answer (SPEC "Invalid outputs are kept and
flagged"; formats of seed 001 C.2 and of `designs.l2d.SYSTEM_PROMPTS`).

Both parses run on every answer and both are stored per trial (`Trial.strict_valid`,
``strict_rule``, ``lenient_valid``, ``lenient_rule``, ``lenient_error``; ``parse_error`` is the
strict parse's error). The **strict parse is the headline**: ``Trial.valid`` = ``strict_valid``,
and every statistic uses ``valid``. The lenient parse is shown beside it in every table that
reports validity, as a measure of how much of a model's invalidity is format, not content.

Strict: the format the prompt asks for, exactly (surrounding whitespace aside):

- option letter (seed 001 C.2 multiple-choice probes): one JSON object ``{"answer": "X"}`` with
  exactly that key, X one of the option letters shown (upper case);
- exact count (P3a/P3b): one integer 0..8, nothing else;
- Design A number: one JSON object ``{"answer": <JSON number>}`` (Reliability posteriors:
  exactly the keys ``reliability``, ``justification`` and ``answer``, reliability a JSON number in
  [0, 1], the justification a non-empty string, as seed 000 section 3 asks); under the CoT and
  Defense strategies anything may precede it (the reasoning, the check of the prior), and the
  object must be the last line.

A reasoning block is the model's reasoning channel, not part of its answer: ``<think>``,
``<thinking>``, ``<reasoning>`` or ``<thought>`` blocks (also the DeepSeek-R1 / Qwen3 form, whose
chat template opens the block in the prompt so that the output holds only ``</think>``) and the
gpt-oss "harmony" analysis channel are removed before either parse (the raw text keeps them), so
the same answer is judged alike whether the server split the reasoning off or not. An opened block
that is never closed means the answer is missing or inside the reasoning: invalid in both parses.

Lenient: the strict parse first (rule ``strict``); else the first of these rules that finds an
answer decides, and an answer it finds out of range stays invalid (no later rule is tried):

1. ``fenced_block``: a Markdown code fence holding the JSON object (or the integer);
2. ``json_in_prose`` / ``json_object``: the last JSON object with an ``answer`` key, with prose
   around it or alone (extra keys, a letter in lower case, "A." or "(A)", a number as a string);
3. ``json_like``: a broken object such as ``{'answer': 'B'}``, ``{answer: B}``, ``{"answer": 1,500}``;
4. ``answer_label``: "Answer: B", "The final answer is **7**", ``\\boxed{B}`` (the last one);
5. ``bare_value``: the whole answer is the value, with Markdown removed (``**5**``, "B.", "(B)");
6. ``last_line``: the last line is such a bare value (an integer after a reasoning paragraph);
7. ``number_word`` (counts only): "five".

A leading "Reasoning:" / "Thinking:" / "Analysis:" section (a label, then prose) is dropped first,
up to an "Answer:" line, a JSON object or code fence, or else the last line (rule prefix
``reasoning_label+``). Modifiers name what else was forgiven: ``+lowercase``, ``+option_text``,
``+extra_keys``, ``+string_number``, ``+thousands``, ``+markdown``; a ``reasoning_block+``
prefix says a reasoning block was removed. The lenient parse never searches inside reasoning.

Numbers (Design A; lenient only reads numbers written as text): a plain decimal with a point
(``1500``, ``1.5``, ``-2.5e3``); thousands grouped by commas (``1,500``, ``1,234,567.5``) or by
spaces (``1 500``, also no-break and thin spaces) are thousands separators (``+thousands``). A
comma that does not group thousands (``1,5``, ``1,50``, ``12,34,567``) is ambiguous (a decimal
comma, or a typo) and invalid in both parses: never 15. ``1.500`` is 1.5 (JSON's decimal point);
units, ``%``, number words and "about" are not removed. Strict reads only JSON numbers, so
``{"answer": "1,500"}`` is strict-invalid and lenient 1500.

Everywhere: an answer cut off by the token limit (``finish_reason`` ``length`` / ``max_tokens``)
is invalid in both parses, whatever its last line says; an answer stopped by the provider's
filter (``content_filter``, ``refusal``) likewise. A letter that is not among the options shown
(``{"answer": "C"}`` on a two-option probe) and a count outside 0..8 are invalid in both.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from ..core.errors import InputError
from ..core.vocab import JSON_LAST_LINE_STRATEGIES, RATING_STRATEGY

HEADLINE = "strict"  # the parse behind Trial.valid (statistics, `valid` in the interchange tables)

REASONING_TAGS = ("think", "thinking", "reasoning", "thought")
# provider stop reasons (OpenAI-format finish_reason, Anthropic stop_reason, Ollama done_reason,
# Gemini finish_reason) that mean the answer was cut off, or withheld by the provider
TRUNCATED_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length",
                               "model_context_window_exceeded"})
FILTERED_REASONS = frozenset({"content_filter", "refusal", "safety", "recitation", "prohibited_content"})
REFUSAL = re.compile(r"\b(I can(no|')t|I am unable|I'm unable|I won't|cannot help)\b", re.I)

_OPEN = re.compile(r"<(" + "|".join(REASONING_TAGS) + r")\s*>", re.I)
_CLOSE = re.compile(r"</(" + "|".join(REASONING_TAGS) + r")\s*>", re.I)
_HARMONY_FINAL = re.compile(r"<\|channel\|>\s*final\s*<\|message\|>")
_HARMONY_OTHER = re.compile(r"<\|channel\|>\s*(analysis|commentary)")
_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u200c\u200d\u2060"), None)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.S)
_REASONING_LABEL = re.compile(r"^\s*(?:[*_#]+\s*)?(reasoning|thinking|thoughts?|thought process|analysis|explanation|"
                              r"rationale|step[- ]by[- ]step(?: reasoning)?)\s*(?:[*_]+\s*)?:", re.I)
_ANSWER_LINE = re.compile(r"^\s*(?:[*_#]+\s*)?(?:final\s+)?answer\b", re.I)
_LABEL = re.compile(r"(?:\b(?:final\s+|correct\s+)?answer\b[*_]*\s*(?:is\b\s*:?|[:=\-\u2013])\s*[*_]*\s*"
                    r"(?:option\s+|choice\s+)?|\\boxed\{)", re.I)
_STRICT_LETTER = re.compile(r'\{[ \t\n\r]*"answer"[ \t\n\r]*:[ \t\n\r]*"([A-Z])"[ \t\n\r]*\}')
_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}

# numbers written as text (lenient): plain, comma-grouped thousands, space-grouped thousands
_PLAIN = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", re.A)
_COMMA_GROUPS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", re.A)
_SPACE_GROUPS = re.compile(r"[-+]?\d{1,3}(?:[ \u00a0\u202f\u2009]\d{3})+(?:\.\d+)?", re.A)
# a number-like token in text: space-grouped thousands, or digits with commas and points (kept whole, so
# that read_number judges "1,5" instead of reading "1"), with an exponent
_NUMBER_TOKEN = re.compile(r"[-+\u2212]?(?:\d{1,3}(?:[ \u00a0\u202f\u2009]\d{3})+(?:\.\d+)?|\d[\d,.]*\d|\d)"
                           r"(?:[eE][-+]?\d+)?|[-+\u2212]?\.\d+", re.A)


@dataclass(frozen=True)
class AnswerSpec:
    """What a request asks for: ``kind`` 'letter' (``letters`` shown), 'integer' (``lo..hi``) or
    'number' (``json_last_line``: CoT's reasoning-then-JSON; ``want_reliability``: Reliability posterior)."""

    kind: str
    letters: str = "ABCD"
    lo: int = 0
    hi: int = 8
    json_last_line: bool = False
    want_reliability: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("letter", "integer", "number"):
            raise InputError(f"unknown answer format {self.kind!r}; expected letter, integer or number")


@dataclass
class ParsedAnswer:
    valid: bool
    answer: str | None = None
    value: float | None = None
    rated_reliability: float | None = None
    error: str | None = None
    rule: str | None = None  # which rule found the answer (valid or out of range); None if nothing was found


@dataclass
class TrialParse:
    """Both parses of one answer, with the provider's stop reason."""

    strict: ParsedAnswer
    lenient: ParsedAnswer
    finish_reason: str | None = None
    cut_off: bool = False  # truncated or filtered by the provider

    @property
    def headline(self) -> ParsedAnswer:
        return self.strict if HEADLINE == "strict" else self.lenient

    @property
    def recovered(self) -> ParsedAnswer | None:
        """The answer stored in the trial's answer columns: the strict one, else the lenient one, else none
        (the lenient parse agrees with the strict one whenever the strict parse is valid)."""
        return self.strict if self.strict.valid else self.lenient if self.lenient.valid else None

    def status(self, raw: str) -> str:
        """ok (strict-valid) | lenient_only | truncated | refusal | parse_failure (`core.vocab.TRIAL_STATUSES`)."""
        if self.strict.valid:
            return "ok"
        if self.lenient.valid:
            return "lenient_only"
        if self.cut_off:
            return "refusal" if (self.finish_reason or "").lower() in FILTERED_REASONS else "truncated"
        return failure_status(raw)


# ------------------------------------------------------------------ the request's format
def answer_spec(answer_format: str, *, options_json: str | None = None, messages_json: str | None = None,
                strategy: str | None = None, stage: str | None = None) -> AnswerSpec:
    """The format a planned request asks for. The option letters are the keys of ``options_json`` (the
    letter -> state map of P1/P4), else the lettered lines ending the last user message (P2, P3c),
    else A-D; they are the letters the model was shown (tests/test_parsing.py checks every planned request)."""
    if answer_format == "letter":
        return AnswerSpec("letter", letters=_letters(_options(options_json), messages_json))
    if answer_format == "integer":
        return AnswerSpec("integer")
    return AnswerSpec(answer_format, json_last_line=strategy in JSON_LAST_LINE_STRATEGIES,
                      want_reliability=strategy == RATING_STRATEGY and stage == "posterior")


def _letters(options: dict[str, str], messages_json: str | None) -> str:
    return "".join(options) or _shown_letters(messages_json) or "ABCD"


def _options(options_json: str | None) -> dict[str, str]:
    """The letter -> state map of a request (P1/P4); {} where it has none (P2, P3c, integers, Design A)."""
    if not options_json or options_json == "{}":
        return {}
    try:
        opts = json.loads(options_json)
    except json.JSONDecodeError:
        return {}
    return ({k: v for k, v in opts.items() if isinstance(k, str) and len(k) == 1 and k.isupper()}
            if isinstance(opts, dict) else {})


def _shown_letters(messages_json: str | None) -> str:
    try:
        msgs = json.loads(messages_json or "[]")
    except json.JSONDecodeError:
        return ""
    user = next((m.get("content") for m in reversed(msgs) if isinstance(m, dict) and m.get("role") == "user"), None)
    if not isinstance(user, str):
        return ""
    tail = user.rstrip().rsplit("\n\n", 1)[-1]
    letters = re.findall(r"(?m)^([A-Z])\. ", tail)
    return "".join(letters) if letters and letters == sorted(set(letters)) else ""


def finish_reason(message: Any) -> str | None:
    """The provider's stop reason of a LangChain message: ``finish_reason`` (OpenAI format, also
    Gemini), ``stop_reason`` (Anthropic), ``done_reason`` (Ollama), from ``response_metadata``."""
    meta = getattr(message, "response_metadata", None) or {}
    for key in ("finish_reason", "stop_reason", "done_reason"):
        v = meta.get(key)
        if v:
            return str(getattr(v, "value", v))
    return None


# ------------------------------------------------------------------ reasoning blocks
def strip_reasoning(text: str) -> tuple[str, list[str], str | None]:
    """``(answer text, blocks removed, error)``: the text without its reasoning blocks; ``error``
    when a block is opened and never closed (the answer is missing or inside the reasoning)."""
    t = text or ""
    if not t.isascii():
        t = t.translate(_INVISIBLE)
    removed: list[str] = []
    if "<" not in t:  # no tag of any kind: nothing to remove (most answers)
        return t, removed, None
    if "<|channel|>" in t:  # gpt-oss harmony format served raw
        finals = list(_HARMONY_FINAL.finditer(t))
        if finals:
            t = re.sub(r"(<\|(return|end|call)\|>\s*)+$", "", t[finals[-1].end():].rstrip())
            removed.append("harmony")
        elif _HARMONY_OTHER.search(t):
            return "", removed, "a reasoning channel (harmony analysis) without a final answer"
    while True:
        close = _CLOSE.search(t)
        opened = _OPEN.search(t)
        if close is None:
            if opened is not None:
                return "", removed, (f"reasoning block <{opened.group(1).lower()}> is never closed "
                                     f"(cut off, or the answer is inside the reasoning)")
            return t, removed, None
        if opened is None or opened.start() > close.start():
            # DeepSeek-R1 / Qwen3: the template opened the block in the prompt; the output starts inside it
            tag = close.group(1).lower()
            t = t[close.end():]
            removed.append(tag)
            continue
        tag = opened.group(1).lower()
        end = re.compile(rf"</{tag}\s*>", re.I).search(t, opened.end())
        if end is None:
            return "", removed, f"reasoning block <{tag}> is never closed (cut off, or the answer is inside the reasoning)"
        t = t[:opened.start()] + t[end.end():]
        removed.append(tag)


# ------------------------------------------------------------------ strict
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key in {keys}")
    return dict(pairs)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except ValueError:  # JSONDecodeError, a duplicate key, NaN/Infinity
        return None
    return obj if isinstance(obj, dict) else None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _is_json_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_strict(text: str, spec: AnswerSpec) -> ParsedAnswer:
    body, removed, err = strip_reasoning(text)
    if err:
        return ParsedAnswer(False, error=err)
    body = body.strip()
    prefix = "reasoning_block+" if removed else ""
    if not body:
        return ParsedAnswer(False, error="empty answer" + (" after the reasoning block" if removed else ""))
    if spec.kind == "integer":
        if not re.fullmatch(r"[-+]?[0-9]+", body):
            return ParsedAnswer(False, error="not exactly one integer")
        v = int(body)
        if not spec.lo <= v <= spec.hi:
            return ParsedAnswer(False, error=f"integer {v} outside {spec.lo}..{spec.hi}", rule=prefix + "integer")
        return ParsedAnswer(True, answer=str(v), value=float(v), rule=prefix + "integer")
    rule = prefix + "json_object"
    if spec.kind == "letter":  # the common case at once: exactly {"answer": "X"} (JSON whitespace allowed)
        m = _STRICT_LETTER.fullmatch(body)
        if m:
            a = m.group(1)
            if a not in spec.letters:
                return ParsedAnswer(False, error=f"answer {a!r} is not one of the options {', '.join(spec.letters)}",
                                    rule=rule)
            return ParsedAnswer(True, answer=a, rule=rule)
    if spec.kind == "number" and spec.json_last_line:
        body = body.splitlines()[-1].strip()
        rule = prefix + "json_last_line"
    obj = _json_object(body)
    if obj is None:
        where = "the last line is not" if spec.kind == "number" and spec.json_last_line else "not"
        return ParsedAnswer(False, error=f"{where} one JSON object (with unique keys)")
    if spec.kind == "letter":
        if set(obj) != {"answer"}:
            return ParsedAnswer(False, error=f"JSON keys {sorted(obj)} are not exactly ['answer']")
        a = obj["answer"]
        if not isinstance(a, str) or len(a) != 1 or not a.isupper():
            return ParsedAnswer(False, error=f"answer {a!r} is not one option letter")
        if a not in spec.letters:
            return ParsedAnswer(False, error=f"answer {a!r} is not one of the options {', '.join(spec.letters)}",
                                rule=rule)
        return ParsedAnswer(True, answer=a, rule=rule)
    keys = {"answer", "reliability", "justification"} if spec.want_reliability else {"answer"}
    if set(obj) != keys:
        return ParsedAnswer(False, error=f"JSON keys {sorted(obj)} are not exactly {sorted(keys)}")
    v = obj["answer"]
    if not _is_json_number(v):
        return ParsedAnswer(False, error=f"answer {v!r} is not a JSON number")
    rr = None
    if spec.want_reliability:
        rr = obj["reliability"]
        if not _is_json_number(rr) or not 0 <= rr <= 1:
            return ParsedAnswer(False, error=f"reliability {rr!r} is not a JSON number in [0, 1]", rule=rule)
        rr = float(rr)
        why = obj["justification"]
        if not isinstance(why, str) or not why.strip():
            return ParsedAnswer(False, error=f"justification {why!r} is not a non-empty string", rule=rule)
    return ParsedAnswer(True, answer=repr(float(v)), value=float(v), rated_reliability=rr, rule=rule)


# ------------------------------------------------------------------ values written as text (lenient)
def read_number(s: str) -> tuple[float | None, list[str], str | None]:
    """A number written as text: ``(value, modifiers, error)`` by the rules in the module docstring."""
    t = s.strip().replace("\u2212", "-")
    t = re.sub(r"^[*_`]+|[*_`]+$", "", t).strip()
    if _PLAIN.fullmatch(t):
        v = float(t)
        return (v, [], None) if math.isfinite(v) else (None, [], f"{s!r} is not a finite number")
    for pat in (_COMMA_GROUPS, _SPACE_GROUPS):
        if pat.fullmatch(t):
            return float(re.sub(r"[, \u00a0\u202f\u2009]", "", t)), ["thousands"], None
    if re.search(r"\d,\d", t):
        return None, [], (f"{s.strip()!r} has a comma that does not group thousands (a decimal comma?): "
                          f"ambiguous, not read as a number")
    return None, [], f"{s.strip()!r} is not a plain number"


def _letter(v: Any, spec: AnswerSpec) -> tuple[str | None, list[str], str | None]:
    """An option letter from a JSON value or a label: 'B', 'b', '(B)', 'B.', 'B. <option text>'."""
    if not isinstance(v, str):
        return None, [], f"answer {v!r} is not an option letter"
    t = re.sub(r"^[\s*_`\"'(\[]+|[\s*_`\"')\].]+$", "", v)
    mods = []
    m = re.fullmatch(r"(?:option\s+|choice\s+)?([A-Za-z])(?:[.):]\s+\S.*)?", t, re.S | re.I)
    if not m:
        return None, [], f"answer {v!r} is not an option letter"
    a = m.group(1)
    if len(t) > 1 and not re.fullmatch(r"(?:option\s+|choice\s+)?[A-Za-z]", t, re.I):
        mods.append("option_text")
    if a.islower():
        mods.append("lowercase")
        a = a.upper()
    if a not in spec.letters:
        return a, mods, f"answer {a!r} is not one of the options {', '.join(spec.letters)}"
    return a, mods, None


def _integer(v: Any, spec: AnswerSpec, in_json: bool) -> tuple[int | None, list[str], str | None]:
    mods: list[str] = []
    if isinstance(v, bool):
        return None, mods, f"answer {v!r} is not an integer"
    if isinstance(v, str):
        t = re.sub(r"^[\s*_`\"']+|[\s*_`\"'.]+$", "", v)
        if not re.fullmatch(r"[-+]?[0-9]+", t):
            return None, mods, f"answer {v!r} is not an integer"
        v, mods = int(t), ["string_number"] if in_json else []
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        return None, mods, f"answer {v!r} is not an integer"
    if not spec.lo <= v <= spec.hi:
        return v, mods, f"integer {v} outside {spec.lo}..{spec.hi}"
    return v, mods, None


def _number(v: Any, in_json: bool, what: str = "answer") -> tuple[float | None, list[str], str | None]:
    if _is_json_number(v):
        return float(v), [], None
    if isinstance(v, str):
        x, mods, err = read_number(v)
        return x, (["string_number"] if in_json else []) + mods, (f"{what}: {err}" if err else None)
    return None, [], f"{what} {v!r} is not a number"


def _result(spec: AnswerSpec, rule: str, value: Any, mods: list[str], reliability: Any = None, *,
            in_json: bool = False) -> ParsedAnswer:
    """Judge the value a rule found: that rule decides (an out-of-range or ambiguous value is invalid,
    and no later rule is tried); ``rule`` names it either way. ``in_json``: the value is a JSON value
    (a string there is ``+string_number``), else text."""
    if spec.kind == "letter":
        a, m, err = _letter(value, spec)
        name = "+".join([rule] + mods + m)
        return ParsedAnswer(False, error=err, rule=name) if err else ParsedAnswer(True, answer=a, rule=name)
    if spec.kind == "integer":
        i, m, err = _integer(value, spec, in_json)
        name = "+".join([rule] + mods + m)
        return ParsedAnswer(False, error=err, rule=name) if err else ParsedAnswer(True, answer=str(i), value=float(i),
                                                                                  rule=name)
    x, m, err = _number(value, in_json)
    if err:
        return ParsedAnswer(False, error=err, rule="+".join([rule] + mods + m))
    rr = None
    if spec.want_reliability:
        if reliability is None:
            return ParsedAnswer(False, error="no reliability rating found", rule="+".join([rule] + mods + m))
        rr, m2, err = _number(reliability, in_json, "reliability")
        m += [k for k in m2 if k not in m]
        if err or not 0 <= rr <= 1:
            return ParsedAnswer(False, error=err or f"reliability {reliability!r} is not in [0, 1]",
                                rule="+".join([rule] + mods + m))
    return ParsedAnswer(True, answer=repr(x), value=x, rated_reliability=rr, rule="+".join([rule] + mods + m))


class _Conflicting(dict):
    """A JSON object that gives one key twice with different values (``conflicts`` names them)."""

    conflicts: list[str]


def _lenient_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bad = []
    for k, v in pairs:
        if k in out and out[k] != v:
            bad.append(k)
        out[k] = v
    if bad:
        out = _Conflicting(out)
        out.conflicts = bad
    return out


def _json_result(spec: AnswerSpec, rule: str, hit: tuple[Any, Any, list[str], dict[str, Any]]) -> ParsedAnswer:
    answer, rel, mods, obj = hit
    if isinstance(obj, _Conflicting):
        return ParsedAnswer(False, error=f"the JSON object gives {', '.join(map(repr, obj.conflicts))} twice "
                                         f"with different values", rule=rule)
    return _result(spec, rule, answer, mods, rel, in_json=True)


def _objects(text: str) -> list[tuple[int, int, dict[str, Any]]]:
    """Top-level JSON objects in ``text``: (start, end, object), left to right."""
    dec = json.JSONDecoder(object_pairs_hook=_lenient_pairs)
    out, i = [], 0
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        if isinstance(obj, dict):
            out.append((i, end, obj))
        i = end
    return out


def _answer_key(obj: dict[str, Any]) -> tuple[Any, Any, list[str], dict[str, Any]] | None:
    """(answer, reliability, modifiers, object) of an object with an 'answer' key (any case)."""
    keys = {k.lower() if isinstance(k, str) else k: k for k in obj}
    if "answer" not in keys:
        return None
    mods = ["extra_keys"] if set(keys) - {"answer", "reliability"} else []
    rel = obj[keys["reliability"]] if "reliability" in keys else None
    return obj[keys["answer"]], rel, mods, obj


def _json_like(text: str, spec: AnswerSpec) -> tuple[Any, Any, bool] | None:
    """(answer, reliability, answer quoted) of a broken object: single quotes, unquoted keys or values,
    ``{"answer": 1,500}``. Only inside braces."""
    for m in reversed(list(re.finditer(r"\{[^{}]*\}", text))):
        inner = m.group(0)
        a = _json_like_value(inner, "answer")
        if a is not None:
            r = _json_like_value(inner, "reliability")
            return a[0], (r[0] if r else None), a[1]
    return None


def _json_like_value(inner: str, key: str) -> tuple[str, bool] | None:
    """(the value's text, whether it was quoted)."""
    m = re.search(rf"[\"']?\b{key}\b[\"']?\s*[:=]\s*", inner, re.I)
    if not m:
        return None
    rest = inner[m.end():]
    q = re.match(r"([\"'])(.*?)\1", rest, re.S)
    if q:
        return q.group(2), True
    end = re.search(r"\s*(?:,\s*[\"']?[A-Za-z_]|\}|\n)", rest)
    return (rest[:end.start()] if end else rest).strip(), False


def _bare(text: str, spec: AnswerSpec) -> tuple[Any, list[str]] | None:
    """The value when ``text`` is nothing but it (Markdown, quotes, a final period aside)."""
    t = text.strip()
    u = re.sub(r"^(?:[*_`\"']|\s)+|(?:[*_`\"'.]|\s)+$", "", t)
    mods = ["markdown"] if u != t and re.search(r"[*_`]", t) else []
    if not u:
        return None
    if spec.kind == "letter":
        return (u, mods) if re.fullmatch(r"(?:option\s+|choice\s+)?[(\[]?[A-Za-z][)\]]?", u, re.I) else None
    if spec.kind == "integer":
        if re.fullmatch(r"[-+]?[0-9]+", u):
            return u, mods
        if u.lower() in _WORDS:
            return str(_WORDS[u.lower()]), mods + ["number_word"]
        return None
    return (u, mods) if _NUMBER_TOKEN.fullmatch(u) else None


def _label(text: str, spec: AnswerSpec) -> tuple[Any, list[str]] | None:
    """The value after the last answer label ("Answer:", "the final answer is", \\boxed{...})."""
    found = None
    for m in _LABEL.finditer(text):
        rest = text[m.end():]
        if spec.kind == "letter":
            v = re.match(r"[*_`\"'(\[]*([A-Z])[)\]]?(?:[*_`\"']*)(?![A-Za-z0-9])(?!\s+[a-z])", rest)
            if v:
                found = (v.group(1), [])
        elif spec.kind == "integer":
            v = re.match(r"[*_`\"']*([-+]?[0-9]+)(?![0-9]|[.,][0-9])", rest)
            if v:
                found = (v.group(1), [])
        else:
            v = re.match(r"[*_`\"']*(" + _NUMBER_TOKEN.pattern + r")(?![ \u00a0\u202f\u2009]?\d)", rest, re.A)
            if v:
                found = (v.group(1), [])
    return found


def _drop_reasoning_label(body: str) -> tuple[str, bool]:
    """Drop a leading "Reasoning: ..." section up to an answer line, a JSON object or fence, else to the last line."""
    if not _REASONING_LABEL.match(body):
        return body, False
    lines = body.strip().splitlines()
    for i in range(1, len(lines)):
        s = lines[i].lstrip()
        if _ANSWER_LINE.match(s) or s.startswith("{") or s.startswith("```"):
            return "\n".join(lines[i:]), True
    first = _REASONING_LABEL.sub("", lines[0], count=1)
    for i in range(len(lines) - 1, -1, -1):  # the last non-empty line (not the label line itself)
        if lines[i].strip():
            return (lines[i] if i else first), True
    return "", True


def parse_lenient(text: str, spec: AnswerSpec, strict: ParsedAnswer | None = None) -> ParsedAnswer:
    strict = strict if strict is not None else parse_strict(text, spec)
    if strict.valid:
        return ParsedAnswer(True, strict.answer, strict.value, strict.rated_reliability, rule="strict")
    body, removed, err = strip_reasoning(text)
    if err:
        return ParsedAnswer(False, error=err)
    prefix = "reasoning_block+" if removed else ""
    body, labelled = _drop_reasoning_label(body.strip())
    prefix += "reasoning_label+" if labelled else ""
    body = body.strip()
    if not body:
        return ParsedAnswer(False, error="empty answer")
    # 1. a code fence
    for m in reversed(list(_FENCE.finditer(body))):
        inner = m.group(2).strip()
        for _, _, obj in reversed(_objects(inner)):
            hit = _answer_key(obj)
            if hit:
                return _json_result(spec, prefix + "fenced_block", hit)
        if spec.kind == "integer" and re.fullmatch(r"[-+]?[0-9]+", inner):
            return _result(spec, prefix + "fenced_block", inner, [])
    # 2. a JSON object
    for start, end, obj in reversed(_objects(body)):
        hit = _answer_key(obj)
        if hit:
            alone = not body[:start].strip() and not body[end:].strip()
            return _json_result(spec, prefix + ("json_object" if alone else "json_in_prose"), hit)
    # 3. a broken object
    like = _json_like(body, spec)
    if like is not None:
        return _result(spec, prefix + "json_like", like[0], [], like[1], in_json=like[2])
    if spec.want_reliability:
        return ParsedAnswer(False, error="no JSON object with an answer and a reliability rating")
    # 4. an answer label; 5. the whole answer; 6. its last line
    found = _label(body, spec)
    if found is not None:
        return _result(spec, prefix + "answer_label", found[0], found[1])
    found = _bare(body, spec)
    if found is not None:
        return _result(spec, prefix + "bare_value", found[0], found[1])
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if len(lines) > 1:
        found = _bare(lines[-1], spec)
        if found is not None:
            return _result(spec, prefix + "last_line", found[0], found[1])
    return ParsedAnswer(False, error=f"no {_WHAT[spec.kind]} found")


_WHAT = {"letter": "option letter", "integer": "integer", "number": "number"}


# ------------------------------------------------------------------ both, and a trial's columns
def parse_answer(text: str, spec: AnswerSpec, *, finish_reason: str | None = None) -> TrialParse:
    """Both parses of ``text``; an answer the provider cut off or filtered is invalid in both."""
    fr = (finish_reason or "").strip().lower()
    if fr in TRUNCATED_REASONS or fr in FILTERED_REASONS:
        why = ("cut off at the token limit" if fr in TRUNCATED_REASONS else "stopped by the provider's filter")
        p = ParsedAnswer(False, error=f"{why} (finish_reason={finish_reason}): never a valid answer")
        return TrialParse(p, replace(p), finish_reason, cut_off=True)
    strict = parse_strict(text, spec)
    return TrialParse(strict, parse_lenient(text, spec, strict), finish_reason)


def trial_fields(job: dict[str, Any], raw: str, finish_reason: str | None = None) -> dict[str, Any]:
    """The parse columns of a finished trial from its claimed job (``answer_format``, ``options_json``,
    ``messages_json``, ``strategy``, ``stage``, ``gold``), the raw text and the provider's stop reason.

    ``valid`` is the headline (strict) parse; ``answer``, ``value``, ``rated_reliability``, ``choice``
    and ``correct`` hold the answer recovered (the strict one, else the lenient one), so the same
    columns serve an analysis under either parse (filter on ``valid`` or on ``lenient_valid``)."""
    fmt = job["answer_format"]
    opts = _options(job.get("options_json")) if fmt == "letter" else {}
    if fmt == "letter":
        spec = AnswerSpec("letter", letters=_letters(opts, job.get("messages_json")))
    else:
        spec = answer_spec(fmt, strategy=job.get("strategy"), stage=job.get("stage"))
    tp = parse_answer(raw, spec, finish_reason=finish_reason)
    rec = tp.recovered
    choice = correct = None
    if rec is not None and spec.kind == "letter":
        choice = opts.get(rec.answer)
    if rec is not None and job.get("gold") is not None:
        correct = rec.answer == job["gold"]
    return {"status": tp.status(raw), "valid": tp.headline.valid, "answer": rec.answer if rec else None,
            "value": rec.value if rec else None, "rated_reliability": rec.rated_reliability if rec else None,
            "choice": choice, "correct": correct, "parse_error": tp.strict.error,
            "strict_valid": tp.strict.valid, "strict_rule": tp.strict.rule,
            "lenient_valid": tp.lenient.valid, "lenient_rule": tp.lenient.rule, "lenient_error": tp.lenient.error,
            "finish_reason": finish_reason}


def response_schema(spec: AnswerSpec) -> dict[str, Any] | None:
    """The JSON schema of what the strict parse accepts, for a provider's structured output; None where
    the prompt asks for no bare JSON object (exact counts, CoT's reasoning before the JSON)."""
    if spec.kind == "integer" or spec.json_last_line:
        return None
    props: dict[str, Any] = ({"answer": {"type": "string", "enum": list(spec.letters)}} if spec.kind == "letter"
                             else {"answer": {"type": "number"}})
    if spec.want_reliability:
        props["reliability"] = {"type": "number", "minimum": 0, "maximum": 1}
        props["justification"] = {"type": "string", "minLength": 1}
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def message_fields(job: dict[str, Any], message: Any) -> dict[str, Any]:
    """`trial_fields` of a LangChain reply, with ``raw_response``: the content as received (a list of
    content blocks as JSON), parsed on its text blocks (an Anthropic ``thinking`` block is reasoning)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        raw = text = content
    else:
        raw = json.dumps(content, ensure_ascii=False)
        text = "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                       if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))
    return {"raw_response": raw, **trial_fields(job, text, finish_reason(message))}


PARSE_COLUMNS = ["raw_response", "status", "valid", "answer", "value", "rated_reliability", "choice", "correct", "parse_error",
                 "strict_valid", "strict_rule", "lenient_valid", "lenient_rule", "lenient_error", "finish_reason"]


def parse(answer_format: str, text: str, *, want_reliability: bool = False, letters: str = "ABCD",
          finish_reason: str | None = None) -> ParsedAnswer:
    """The headline (strict) parse of ``text`` for a bare format name."""
    spec = AnswerSpec(answer_format, letters=letters, want_reliability=want_reliability)
    return parse_answer(text, spec, finish_reason=finish_reason).headline


def failure_status(text: str) -> str:
    """'refusal' when the text reads like one, else 'parse_failure'."""
    return "refusal" if REFUSAL.search(text or "") else "parse_failure"
