"""Audit of the Design B stimuli for issue 23, points 7-12: the figures quoted before and after.

It reads only what every version of the package has (the world bank, `world_requests`, the graph
builders, `render_graph`), so the same script measures an old checkout and the current one:

    PYTHONPATH=<checkout>[:/tmp/toklib] python benchmarks/audit_cue_stimuli.py [--dump FILE.jsonl.gz]

Figures (all 500 worlds of seed 0):
- 7  order x time requests whose A-first / B-first texts are not the same lines once message
     numbers are normalised, or that carry a per-position receipt stamp (13:05, 13:10, ...) or an
     order word ("in the order received", "After that", "Then,")
- 8  message lines citing a limited-quality record that state the full code; Flat/Ledger
     appendices of limited graphs that never show the partial code
- 9  P3a/P3b/P3c golds that disagree with the graph; P3c requests that ask "which source" of a
     world that shows more than two sources
- 10 extra messages and extra sources (structural minus the same world without its axis) per
     state, summed per axis variant and block; requests whose number of sources differs from the
     variant
- 11 blocks of contrasted requests whose arms get different Sham text; Sham rows repeated or
     cut; Sham / Ledger token ratios by the proxy and every real tokenizer importable
- length: the longest request by the proxy (all 64,000 with C0-C4) and by each real tokenizer, and the
     proxy's ratio to each real tokenizer (requests of every 5th world)
- 12 distinct element orders among the ten formats; share of each format's words inside 6-word
     sequences (variables masked) that another format of the same graph also has
``--dump`` writes every C0 request's user text (world, track, condition) for the grammar scan.
``--fit`` (needs the real tokenizers) prints the constants the Sham is sized with: `tokens.ROW_MODELS`
(least squares on every distinct ledger row) and the measured tokens of the Sham rows and of the two
tables' heads (`cue.SHAM_ROW_TOKENS`, `cue.SHAM_HEAD_TOKENS`, `cue.LEDGER_HEAD_TOKENS`).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import re
import statistics
import sys

from discern_stats.core import vocab
from discern_stats.designs import cue, cue_bank, cue_render
from discern_stats.designs.tokens import count_tokens

NUM = re.compile(r"\b(message|statement) \d+\b", re.I)
STAMP = re.compile(r"\b13:(0[5-9]|[1-5]\d)\b")
ORDER_WORDS = re.compile(r"in the order received|\bAfter that\b|\bThen, |\bFinally\b|\bLater\b")
BLOCKS = ("factorial", "swap", "order-time", "structure", "verified")


def block_of(track: str, condition: str) -> str:
    from discern_stats.core.coding import block_of as b
    return b(track, condition)


def appendix(base: str, full: str) -> str:
    """What an intervention appends to the C0 context (the question is identical)."""
    ctx = base.rsplit("\n\nAt 14:00", 1)[0]
    return full[len(ctx) + 2:].rsplit("\n\nAt 14:00", 1)[0]


def real_tokenizers() -> dict:
    """This checkout's `tokens.real_tokenizers` (loaded by path, so an older package is measured too)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("_tokens", Path(__file__).parents[1] / "discern_stats/designs/tokens.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.real_tokenizers()


def audit(dump: str | None) -> dict:
    worlds = cue.build_worlds(0)
    out: dict = collections.defaultdict(collections.Counter)
    ratios: dict[str, list[float]] = collections.defaultdict(list)
    toks = real_tokenizers()
    dumpf = gzip.open(dump, "wt") if dump else None
    extra = collections.defaultdict(lambda: collections.Counter())
    for w in worlds:
        reqs = cue.world_requests(w, list(vocab.INTERVENTIONS))
        by = {(r.intervention, r.track, r.probe, r.condition): r for r in reqs}
        if dumpf:
            for r in reqs:
                if r.intervention == "C0":
                    dumpf.write(json.dumps({"world_id": w.world_id, "stratum": w.stratum, "track": r.track,
                                            "condition": r.condition, "user": r.user}) + "\n")
        # ---- 7: order x time
        for t in ("08", "12"):
            a = by[("C0", "competition", "P4", vocab.order_time_code("A", t))].user
            b = by[("C0", "competition", "P4", vocab.order_time_code("B", t))].user
            same = sorted(NUM.sub("message #", a).splitlines()) == sorted(NUM.sub("message #", b).splitlines())
            for txt in (a, b):
                out["7"]["order-time requests"] += 1
                bad_lines = not same
                stamp = bool(STAMP.search(txt) or ORDER_WORDS.search(txt))
                out["7"]["lines differ"] += bad_lines
                out["7"]["stamp or order word"] += stamp
                out["7"]["affected"] += bad_lines or stamp
        # ---- 8, 10: per request graph
        base_w = dataclasses.replace(w, axis=None, axis_variant=None)
        base_by = {(r.track, r.condition): r for r in cue.world_requests(base_w) if r.probe == "P4"} \
            if w.axis in ("source-count", "graph-topology") else {}
        for r in reqs:
            f = r.facts
            recs = {x["id"]: x for x in f["records"]}
            limited = {k for k, x in recs.items() if x["quality"] == "limited"}
            if r.intervention == "C0" and limited:
                out["8"]["C0 requests with a limited record"] += 1
                bad = [ln for ln in r.user.splitlines() if re.search(r"\bmessage \d+", ln, re.I)
                       and set(re.findall(r"\b(e\d+)\b", ln)) & limited and w.entity_code in ln]
                out["8"]["message lines stating the full code"] += len(bad)
                out["8"]["requests with such a line"] += bool(bad)
            if r.intervention in ("C2", "C3") and limited:
                app = appendix(by[("C0", r.track, r.probe, r.condition)].user, r.user)
                out["8"][f"{r.intervention} appendices of limited graphs"] += 1
                out["8"][f"{r.intervention} appendices without the partial code"] += (
                    cue_render.partial_code(w.entity_code) not in app)
            if r.intervention == "C0" and (r.track, r.condition) in base_by:
                bf = base_by[(r.track, r.condition)].facts
                blk = block_of(r.track, r.condition)

                def counts(ff):
                    rr = {x["id"]: x for x in ff["records"]}
                    m = collections.Counter(rr[x["record"]]["state"] for x in ff["messages"])
                    s = collections.Counter(st for st in ("A", "B") for o in
                                            {x["observer"] for x in ff["records"] if x["state"] == st})
                    return m, s, len(ff["sources"])
                (ma, sa, na), (mb, sb, _) = counts(f), counts(bf)
                key = (w.axis_variant, blk)
                for st in "AB":
                    extra[key][f"msgs {st}"] += ma[st] - mb[st]
                    extra[key][f"srcs {st}"] += sa[st] - sb[st]
                if w.axis == "source-count":
                    out["10"]["source-count P4 requests"] += 1
                    out["10"]["sources shown != variant"] += na != int(w.axis_variant[0])
        # ---- 9: P3 golds
        for hc in vocab.HISTORY_CONFIGS:
            g = cue_bank.history_graph(w, hc)
            hist = {s.name: s.history for s in g.sources}
            c = by[("C0", "representation", "P3c", hc)]
            named = re.findall(r"\bO\d\b", c.user.rsplit("\n\n", 1)[1].splitlines()[0])
            among = sorted(set(named)) if len(set(named)) >= 2 else sorted(hist)
            top = max(hist[s] for s in among)
            leaders = [s for s in among if hist[s] == top]
            want = ("C" if len(leaders) > 1 and set(leaders) == {"O1", "O2"} else
                    "A" if leaders == ["O1"] else "B" if leaders == ["O2"] else None)
            out["9"]["P3c requests"] += 1
            out["9"]["P3c gold wrong"] += c.gold != want
            out["9"]["P3c ambiguous (more than 2 sources, none named)"] += len(hist) > 2 and len(set(named)) < 2
            for probe, o in (("P3a", "O1"), ("P3b", "O2")):
                out["9"]["P3a/P3b requests"] += 1
                out["9"]["P3a/P3b gold wrong"] += by[("C0", "representation", probe, hc)].gold != str(hist[o])
        # ---- 11: sham per block
        shams = collections.defaultdict(set)
        for (iv, track, probe, cond), r in by.items():
            if iv != "C1":
                continue
            base = by[("C0", track, probe, cond)].user
            sham = appendix(base, r.user)
            ledger = appendix(base, by[("C3", track, probe, cond)].user)
            blk = block_of(track, cond)
            shams[blk].add(sham)
            rows = sham.splitlines()[1:]
            ncol = rows[0].count("|") if rows else 0
            out["11"]["C1 requests"] += 1
            out["11"]["shams with a repeated row"] += len(set(rows)) < len(rows)
            out["11"]["shams with a cut row"] += any(x.count("|") != ncol for x in rows)
            words = lambda s: len(re.findall(r"\w+|[^\w\s]", s))  # noqa: E731
            ratios["words+punctuation"].append(words(sham) / words(ledger))
            ratios["proxy"].append(count_tokens(sham) / count_tokens(ledger))
            for name, fn in toks.items():
                ratios[name].append(fn(sham) / fn(ledger))
        for blk, s in shams.items():
            out["11"][f"{blk} blocks"] += 1
            out["11"][f"{blk} blocks with different Sham text in its arms"] += len(s) > 1
        # ---- request length: the proxy against each real tokenizer
        for r in reqs:
            n = count_tokens(r.system) + count_tokens(r.user)
            out["length"]["longest request, proxy"] = max(out["length"]["longest request, proxy"], n)
            if w.index % 5 == 0:
                for name, fn in toks.items():
                    real = fn(r.system) + fn(r.user)
                    ratios[f"proxy / {name}, requests of every 5th world"].append(n / real)
                    out["length"][f"longest request of every 5th world, {name}"] = max(
                        out["length"][f"longest request of every 5th world, {name}"], real)
    if dumpf:
        dumpf.close()
    # ---- 12: element order and shared template sentences
    orders, shares = format_organisation(worlds)
    out["12"]["distinct element orders among the 10 formats"] = len(set(orders.values()))
    out["12"]["formats sharing the commonest order"] = collections.Counter(orders.values()).most_common(1)[0][1]
    res = {k: dict(v) for k, v in out.items()}
    res["10 extra per state"] = {f"{v} / {b}": dict(c) for (v, b), c in sorted(extra.items())}
    res["11 ratios"] = {k: {"min": round(min(v), 3), "mean": round(statistics.fmean(v), 3), "max": round(max(v), 3),
                            "outside 10%": sum(abs(x - 1) > 0.10 for x in v), "n": len(v)} for k, v in ratios.items()}
    res["12 shared share"] = {k: round(v, 3) for k, v in shares.items()}
    res["12 element orders"] = orders
    return res


MASK = [(re.compile(r"\b\d\d:\d\d\b"), "TIME"), (re.compile(r"\b[A-Z]{2}-[\d?]{4}\w*"), "CODE"),
        (re.compile(r"\b[eORSTD]\d+\b"), "ID"), (re.compile(r"\b\d+\b"), "N")]


def _classify(g, line: str) -> str | None:
    low = line.lower()
    if re.search(r"\b(message|statement) \d+", low) and re.search(r"\be\d\b", low):
        return "M"
    if re.search(r"\brecord e\d\b|\(e\d\)|\be\d\b", low) and re.search(r"\bO\d\b", line):
        return "R"
    if re.search(r"\b\d(?: of |/)8\b", low):
        return "H"
    if "initial" in low and "10:00" in low:
        return "I"
    if g.background_time in line:
        return "G"
    if "verif" in low and "14:00" in low:
        return "V"
    return None


def format_organisation(worlds) -> tuple[dict[str, str], dict[str, float]]:
    fmts = list(cue_render.RENDERERS)
    orders = {}
    g0 = cue_bank.verified_graph(worlds[0], "A")
    for fmt in fmts:
        seq = [k for k in (_classify(g0, ln) for ln in cue_render.render_graph(g0, fmt).splitlines()) if k]
        orders[fmt] = "".join(k for i, k in enumerate(seq) if k not in seq[:i])
    share = collections.defaultdict(list)
    for w in [w for w in worlds if w.stratum == "core"][:40]:
        g = cue_bank.history_graph(w, "HL")
        texts = {}
        for fmt in fmts:
            t = cue_render.render_graph(g, fmt)
            for v in sorted({w.value_a, w.value_b, w.entity, w.attr, w.noun, w.domain}, key=len, reverse=True):
                t = t.replace(v, "VAR")
            for pat, rep in MASK:
                t = pat.sub(rep, t)
            texts[fmt] = re.findall(r"[A-Za-z']+|[^\sA-Za-z']", t)
        grams = {f: collections.Counter(tuple(ws[i:i + 6]) for i in range(len(ws) - 5)) for f, ws in texts.items()}
        for f, ws in texts.items():
            others = set().union(*(set(grams[o]) for o in fmts if o != f))
            covered = [False] * len(ws)
            for i in range(len(ws) - 5):
                if tuple(ws[i:i + 6]) in others:
                    covered[i:i + 6] = [True] * 6
            share[f].append(sum(covered) / len(ws))
    return orders, {f: statistics.fmean(v) for f, v in share.items()}


def fit() -> None:
    import numpy as np
    from discern_stats.designs.tokens import FAMILIES, token_features
    toks = real_tokenizers()
    rows, heads = set(), set()
    for w in cue.build_worlds(0):
        for _, _, g, _ in cue.decision_graphs(w):
            lines = cue.render_ledger(cue.fact_set(g)).splitlines()
            heads.add("\n".join(lines[:2]))
            rows.update(lines[2:])
    rows = sorted(rows)
    X = np.array([token_features(r) for r in rows], float)
    print(f"# {len(rows)} distinct ledger rows")
    for fam in FAMILIES:
        y = np.array([toks[fam](r) for r in rows], float)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        rmse = float(np.sqrt(np.mean((y - X @ coef) ** 2)))
        print(f'    "{fam}": {tuple(round(float(c), 3) for c in coef)},  # rmse {rmse:.2f}, mean {y.mean():.1f}')
    (head,) = heads
    print("LEDGER_HEAD_TOKENS =", tuple(toks[f](head) for f in FAMILIES))
    print("SHAM_HEAD_TOKENS =", tuple(toks[f](cue.SHAM_TITLE + "\n" + cue.SHAM_HEADER) for f in FAMILIES))
    print("SHAM_ROW_TOKENS = (")
    for r in cue.SHAM_ROWS:
        print(f"    {tuple(toks[f](r) for f in FAMILIES)},")
    print(")")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump")
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    if args.fit:
        fit()
        return
    json.dump(audit(args.dump), sys.stdout, indent=1, default=str)
    print()


if __name__ == "__main__":
    main()
