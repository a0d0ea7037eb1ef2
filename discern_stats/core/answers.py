"""Numeric answers of Design A (seed 000): the precision an item states its answer at, claims
rounded to it, the per-item correctness rule, and which items a multiplicative factor suits.

Precision. An item's stated answer T has a number of significant figures k (the item tag
``sig_figs``, else the significant digits of T as written: 45.2 -> 3, 0.25 -> 2, an integer ->
exact units). A claim C = T x F is rounded to k significant figures and never to more decimals
than T carries (`claim_text`; the product is taken of the unrounded value, tag ``truth_exact``,
where the item has one), so "10.66666667" becomes "10.7" and an integer answer gets an integer
claim: the form of a claim does not reveal its factor.

Resolution. Two answers "agree" (no move, claim agrees with the prior) when they differ by at
most half a unit in the last stated digit of T (`resolution`); an item without ``sig_figs``
has resolution 0 (exact comparison, as before this module existed).

Correctness. An answer x is correct for T under the item's rule (tag ``correct_rule``):

- ``exact``: x = T (the default for an item that states no rule);
- ``rel:X``: |x - T| <= X |T| (relative tolerance, e.g. ``rel:0.05``);
- ``abs:X``: |x - T| <= X (absolute tolerance, e.g. ``abs:1`` year);
- ``sig:K``: |x - T| <= half a unit in the K-th significant figure of T (agreement at K
  significant figures).

The rule applies alike to the prior-correct condition of CD, the outcome taxonomy and the
claim-wrong condition (`stats.l2d`).

Scale (seed 000 multiplies every truth by F in {1/3, 1/2, 1, 2, 3}). A factor means something
only on a ratio scale: a quantity with a true zero where "twice as much" is meaningful (counts,
amounts, durations, money, distances). Calendar years and dates (arbitrary zero), temperatures in
degrees Celsius or Fahrenheit, and percentages or shares bounded at 100 are not: 3 x 1989 is no
year, 3 x 60 % is no share. Items tag ``scale``: ``ratio`` (default) or ``interval`` /
``bounded``; `factor_scale_problem` names why an item cannot take the factors, and
`store.importing.import_items` refuses such an item in one line (see README, Stimuli).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

_RULE = re.compile(r"^\s*(exact|rel|abs|sig)\s*(?::\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?))?\s*$")
SCALES = ("ratio", "interval", "bounded")


def parse_rule(rule: str | None) -> tuple[str, float]:
    """(kind, parameter) of a correctness rule; ``None`` or empty -> ("exact", 0). Raises ValueError."""
    if rule is None or (isinstance(rule, float) and math.isnan(rule)) or str(rule).strip() == "":
        return "exact", 0.0
    m = _RULE.match(str(rule).lower())
    if not m:
        raise ValueError(f"correctness rule {rule!r} is not one of: exact, rel:X, abs:X, sig:K")
    kind, val = m.group(1), m.group(2)
    if kind == "exact":
        if val is not None:
            raise ValueError(f"correctness rule {rule!r}: 'exact' takes no number")
        return "exact", 0.0
    if val is None:
        raise ValueError(f"correctness rule {rule!r}: '{kind}' needs a number, e.g. {kind}:"
                         f"{'3' if kind == 'sig' else '0.05'}")
    x = float(val)
    if kind == "sig" and (x != int(x) or x < 1):
        raise ValueError(f"correctness rule {rule!r}: sig needs a whole number of significant figures >= 1")
    if kind == "rel" and not 0 <= x < 1:
        raise ValueError(f"correctness rule {rule!r}: a relative tolerance must be in [0, 1)")
    return kind, x


def _half_unit(T: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Half a unit in the k-th significant figure of |T| (0 where T = 0)."""
    T = np.abs(np.asarray(T, float))
    with np.errstate(divide="ignore"):
        e = np.floor(np.log10(np.where(T > 0, T, 1.0)))
    return np.where(T > 0, 0.5 * 10.0 ** (e - np.asarray(k, float) + 1), 0.0)


def tolerance(T: np.ndarray, rules) -> np.ndarray:  # noqa: ANN001 - a rule string or a sequence of them
    """The absolute tolerance of each row's correctness rule at its truth T. Each distinct rule is
    parsed once; one rule for all rows (a string or None) needs no pass over the rows."""
    T = np.asarray(T, float)
    if isinstance(rules, str) or rules is None:
        parsed, code = [parse_rule(rules)], np.zeros(len(T), np.intp)
    else:
        keys = [r if isinstance(r, str) or r is None else (None if isinstance(r, float) and math.isnan(r) else str(r))
                for r in rules]
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        parsed = [parse_rule(k) for k in index]
        code = np.fromiter((index[k] for k in keys), np.intp, len(keys))
    kinds = np.array([k for k, _ in parsed], dtype=object)[code] if len(T) else np.empty(0, dtype=object)
    vals = np.array([v for _, v in parsed], float)[code] if len(T) else np.zeros(0)
    out = np.zeros(len(T))
    rel = kinds == "rel"
    out[rel] = vals[rel] * np.abs(T[rel])
    ab = kinds == "abs"
    out[ab] = vals[ab]
    sig = kinds == "sig"
    out[sig] = _half_unit(T[sig], vals[sig])
    return out


def is_correct(x: np.ndarray, T: np.ndarray, rules) -> np.ndarray:  # noqa: ANN001
    """Whether each answer x is correct for its truth T under its rule (`tolerance`); a tiny
    float slack (1e-9 relative) absorbs decimal-to-binary noise of numbers written as text."""
    x, T = np.asarray(x, float), np.asarray(T, float)
    slack = 1e-9 * np.maximum(np.abs(T), 1e-12)
    return np.abs(x - T) <= tolerance(T, rules) + slack


def sig_digits(text: str) -> int:
    """Significant digits of a number written as text: 45.2 -> 3, 0.050 -> 2, 118000000 -> 3 (trailing
    zeros of an integer do not count), 8 -> 1."""
    s = text.strip().lstrip("+-").replace(",", "")
    if "e" in s.lower():
        s = s.lower().split("e")[0]
    if "." in s:
        digits = s.replace(".", "").lstrip("0")
        return max(len(digits), 1)
    digits = s.lstrip("0").rstrip("0")
    return max(len(digits), 1)


def decimals(text: str) -> int:
    """Decimal places of a number written as text (0 for an integer)."""
    s = text.strip()
    return len(s.split(".", 1)[1]) if "." in s else 0


def format_number(x: float) -> str:
    """Plain decimal text with up to 10 significant digits (no exponent)."""
    s = format(x, ".10g")
    if "e" in s or "E" in s:
        s = format(x, ".10f").rstrip("0").rstrip(".")
    return s


def round_sig(x: float, k: int, max_decimals: int | None = None) -> str:
    """``x`` rounded half away from zero to ``k`` significant figures, and to at most ``max_decimals``
    decimals, as plain text that keeps its significant trailing zeros (0.50, not 0.5)."""
    if x == 0:
        return "0"
    d = Decimal(repr(float(x)))
    exp = d.adjusted() - k + 1  # the exponent of the last kept digit
    if max_decimals is not None:
        exp = max(exp, -max_decimals)
    q = d.quantize(Decimal(1).scaleb(exp), rounding=ROUND_HALF_UP)
    if q == 0:  # a claim rounded to nothing keeps one significant figure
        q = d.quantize(Decimal(1).scaleb(d.adjusted()), rounding=ROUND_HALF_UP)
    s = format(q, "f")
    return s


def stated_precision(truth: float, sig_figs: int | None = None) -> tuple[int | None, int]:
    """(significant figures, maximum decimals) a claim of this item is rounded to: the item's
    ``sig_figs`` (or the significant digits of T as written) and T's own decimals. An integer T
    without ``sig_figs`` is exact units: (None, 0), claims rounded to whole units."""
    text = format_number(float(truth))
    dp = decimals(text)
    if sig_figs is not None and not (isinstance(sig_figs, float) and math.isnan(sig_figs)):
        return int(sig_figs), dp
    if dp == 0:
        return None, 0
    return sig_digits(text), dp


def claim_text(truth: float, factor: float, sig_figs: int | None = None, exact: float | None = None) -> str:
    """The claim C = T x F as the text a request shows, at the item's stated precision. With the
    unrounded value behind a rounded stated answer (``exact``, the item tag ``truth_exact``) the
    product is taken of it, so that e.g. every F = 2 claim does not end in an even digit (the
    double of a 3-figure number) and F = 1 still gives the stated answer."""
    k, dp = stated_precision(truth, sig_figs)
    base = float(truth) if exact is None or (isinstance(exact, float) and math.isnan(exact)) else float(exact)
    x = base * float(factor)
    if k is None:
        return str(int(Decimal(repr(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP)))
    return round_sig(x, k, dp)


def resolution(T: np.ndarray, sig_figs) -> np.ndarray:  # noqa: ANN001 - a sequence or None
    """Half a unit in the last stated digit of T where the item states ``sig_figs``; 0 elsewhere."""
    T = np.asarray(T, float)
    if sig_figs is None:
        return np.zeros(len(T))
    k = np.asarray(pd_to_float(sig_figs), float)
    ok = np.isfinite(k)
    out = np.zeros(len(T))
    out[ok] = _half_unit(T[ok], k[ok])
    return out


def pd_to_float(values) -> np.ndarray:  # noqa: ANN001
    out = []
    for v in values:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            out.append(np.nan)
    return np.asarray(out, float)


def factor_scale_problem(question: str, truth: float, scale: str | None = None, max_factor: float = 3.0) -> str | None:
    """Why a multiplicative factor cannot scale this item (None: it can). ``scale`` (the item's tag)
    wins; without it, a question that asks for a year or a date is flagged, as is a percentage that
    the largest factor would push past 100."""
    if scale is not None and str(scale).strip() != "" and not (isinstance(scale, float) and math.isnan(scale)):
        s = str(scale).strip().lower()
        if s not in SCALES:
            return f"scale {scale!r} is not one of {', '.join(SCALES)}"
        return None if s == "ratio" else (f"scale {s!r}: a multiplicative factor (1/3 ... 3) needs a ratio-scale "
                                          f"quantity")
    q = question.lower()
    if re.search(r"\b(in )?(what|which) year\b|\bwhen did\b|\bwhen was\b|\bdate\b", q):
        return "it asks for a year or a date (an interval scale: 3 x 1989 is no year)"
    if re.search(r"\bper ?cent\b|%|\bpercentage\b", q) and float(truth) * max_factor > 100:
        return (f"it asks for a percentage and {format_number(float(truth))} x {max_factor:g} exceeds 100 (a share "
                f"near its bound cannot be multiplied)")
    return None
