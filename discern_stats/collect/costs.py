"""Cost accounting of collection from a price table the user supplies (issue 26 point 11).

The price table is a CSV or YAML file with one row per LLM (the spec's LLM name):
``llm, input_per_million, output_per_million`` (prices per million input and output tokens, in
one currency, named by an optional ``currency`` column). The cost of a trial is
``tokens_in * input_per_million / 1e6 + tokens_out * output_per_million / 1e6``, from the token
counts the provider reported; an attempt that failed reports none and is not priced (most
providers do not bill a 429 or a 5xx). `cost_table` sums it per LLM and run.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import sqlalchemy as sa
import yaml

from ..core.errors import InputError
from ..store.db import LLM, Trial
from ..store.trialdb import TrialDB

PRICE_COLUMNS = ("llm", "input_per_million", "output_per_million")


def load_prices(path: str | Path) -> pd.DataFrame:
    """The price table (see module docstring); `InputError` naming the file, row and column."""
    p = Path(path)
    if not p.is_file():
        raise InputError("price table not found", file=str(p))
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
            rows = [{"llm": k, **v} for k, v in data.items()] if isinstance(data, dict) else data
            df = pd.DataFrame(rows)
        else:
            df = pd.read_csv(p)
    except (yaml.YAMLError, pd.errors.ParserError, UnicodeDecodeError, TypeError, AttributeError) as exc:
        raise InputError(f"cannot read the price table: {' '.join(str(exc).split())[:200]}", file=str(p)) from None
    missing = [c for c in PRICE_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; found {', '.join(map(str, df.columns))}",
                         file=str(p))
    for c in PRICE_COLUMNS[1:]:
        for i, v in enumerate(df[c]):
            try:
                x = float(v)
            except (TypeError, ValueError):
                x = float("nan")
            if not math.isfinite(x) or x < 0:
                raise InputError(f"price {v!r} is not a non-negative number", file=str(p), row=i + 2, column=c)
        df[c] = df[c].astype(float)
    dup = df.llm[df.llm.duplicated()].tolist()
    if dup:
        raise InputError(f"LLM(s) priced twice: {', '.join(map(str, dup))}", file=str(p))
    if "currency" not in df.columns:
        df["currency"] = ""
    return df[[*PRICE_COLUMNS, "currency"]]


def cost_table(db: TrialDB, prices: pd.DataFrame) -> pd.DataFrame:
    """Tokens and cost per LLM and run (``run_id``), with a row per LLM over all runs (``run_id`` NA).
    LLMs without a price get NA cost (their tokens are still counted)."""
    T, L = Trial.__table__, LLM.__table__
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(L.c.name.label("llm"), T.c.run_id, sa.func.count().label("trials"),
                                      sa.func.sum(T.c.tokens_in).label("tokens_in"),
                                      sa.func.sum(T.c.tokens_out).label("tokens_out"))
                            .select_from(T.join(L, T.c.llm_id == L.c.id)).where(T.c.state == "done")
                            .group_by(L.c.name, T.c.run_id)).mappings().all()
    df = pd.DataFrame(rows, columns=["llm", "run_id", "trials", "tokens_in", "tokens_out"])
    df[["tokens_in", "tokens_out"]] = df[["tokens_in", "tokens_out"]].fillna(0).astype("int64")
    total = df.groupby("llm", as_index=False)[["trials", "tokens_in", "tokens_out"]].sum()
    total["run_id"] = pd.NA
    df = pd.concat([df, total], ignore_index=True).merge(prices, on="llm", how="left")
    df["cost"] = df.tokens_in * df.input_per_million / 1e6 + df.tokens_out * df.output_per_million / 1e6
    return df[["llm", "run_id", "trials", "tokens_in", "tokens_out", "cost", "currency"]].sort_values(
        ["llm", "run_id"], na_position="last").reset_index(drop=True)
