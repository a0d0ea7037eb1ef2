"""Planning a collection run: the checks that can refuse it, the LLM rows, the plan's trial rows, and
`prepare_run`, the one preamble every collector process of a run goes through before it claims.

The plan (one ``trial`` row per LLM x request x repeat, unique ``trial.key``) is inserted with
INSERT ... ON CONFLICT DO NOTHING, so re-running a spec never duplicates a trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.errors import SpecError
from ..core.keys import trial_key
from ..store.db import LLM, Request, Trial, insert_ignore
from ..store.trialdb import TrialDB
from .providers import validate_llms
from .spec import RunSpec


def preflight(db: TrialDB, spec: RunSpec) -> None:
    """Every check that can refuse a run, before its first write (a refused run leaves the database
    as it was): the LLMs' settings, keys, profiles and URLs (`providers.validate_llms`), LLM names
    bound to other settings, and planned requests for the spec."""
    validate_llms(spec)
    _check_llm_names(db, spec)
    _planned_requests(db, spec)


def _spec_llm_rows(conn: sa.Connection, spec: RunSpec, *columns: Any) -> Any:
    """The stored ``llm`` rows of the spec's LLMs (matched by name): their name and ``columns``."""
    return conn.execute(sa.select(LLM.name, *columns).where(LLM.name.in_([m.name for m in spec.llms])))


def llm_ids(db: TrialDB, spec: RunSpec) -> dict[str, int]:
    """Name -> id of the spec's LLMs already in the database (a worker reads what its parent planned)."""
    with db.engine.connect() as conn:
        return {r.name: r.id for r in _spec_llm_rows(conn, spec, LLM.id)}


def _check_llm_names(db: TrialDB, spec: RunSpec) -> None:
    with db.engine.connect() as conn:
        got = {r.name: r.params_json for r in _spec_llm_rows(conn, spec, LLM.params_json)}
    for m in spec.llms:
        if m.name in got and got[m.name] != m.params_json():
            raise SpecError(f"LLM name {m.name!r} is already in the database with other settings "
                            f"({got[m.name]}); give these settings a new name")


def ensure_llms(db: TrialDB, spec: RunSpec) -> dict[str, int]:
    _check_llm_names(db, spec)
    rows = [{"name": m.name, "provider": m.kind, "model_id": m.model, "base_url": m.base_url,
             "params_json": m.params_json(), "is_simulator": m.kind == "synthetic"} for m in spec.llms]
    with db.engine.begin() as conn:
        insert_ignore(conn, LLM, rows, ["name"])
        ids = {r.name: r.id for r in _spec_llm_rows(conn, spec, LLM.id)}
    _check_llm_names(db, spec)  # another collector may have bound a name in between
    return ids


def _request_filter(spec: RunSpec) -> list[Any]:
    R = Request.__table__
    cond = [R.c.design == spec.design]
    if spec.design == "cue":
        cond.append(R.c.intervention.in_(spec.interventions or ["C0"]))
    elif spec.strategies:
        cond.append(R.c.strategy.in_(spec.strategies))
    return cond


def _planned_requests(db: TrialDB, spec: RunSpec) -> list[Any]:
    R = Request.__table__
    with db.engine.connect() as conn:
        reqs = conn.execute(sa.select(R.c.id, R.c.key).where(*_request_filter(spec)).order_by(R.c.id)).all()
    if not reqs:
        raise SpecError(f"no planned {spec.design} requests in the database for this spec; run "
                        f"`discern-stats design {spec.design}` first")
    return reqs


def plan_trials(db: TrialDB, spec: RunSpec, llm_ids: dict[str, int]) -> int:
    """Insert the plan's trial rows (idempotent). Returns the number of planned trials."""
    R, T = Request.__table__, Trial.__table__
    cond = _request_filter(spec)
    reqs = _planned_requests(db, spec)
    total = 0
    with db.engine.begin() as conn:
        for m in spec.llms:
            total += len(reqs) * spec.repeats
            have = conn.execute(sa.select(sa.func.count()).select_from(T.join(R, T.c.request_id == R.c.id))
                                .where(T.c.llm_id == llm_ids[m.name], T.c.repeat < spec.repeats, *cond)).scalar()
            if have == len(reqs) * spec.repeats:  # planned before (a resume): nothing to insert
                continue
            pj = m.params_json()
            rows = [{"key": trial_key(m.name, pj, key, rep), "request_id": rid, "llm_id": llm_ids[m.name],
                     "repeat": rep, "state": "pending"} for rep in range(spec.repeats) for rid, key in reqs]
            insert_ignore(conn, Trial, rows, ["key"])
    return total


def open_trials(db: TrialDB, spec: RunSpec, llm_ids: dict[str, int]) -> int:
    """Trials of the spec's LLMs still to answer: pending or claimed (and failed, with ``retry_failed``)."""
    T = Trial.__table__
    states = [T.c.state == "pending", T.c.state == "claimed"] + ([T.c.state == "failed"] if spec.retry_failed else [])
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(T)
                            .where(T.c.llm_id.in_(list(llm_ids.values())), sa.or_(*states))).scalar()


@dataclass
class PreparedRun:
    llm_ids: dict[str, int]
    planned: int  # trials in the plan
    restored: int = 0  # answered responses loaded from the journal of an earlier run (`collect.journal`)


def prepare_run(db: TrialDB, spec: RunSpec) -> PreparedRun:
    """The preamble of a run, once per run (the parent process with ``workers: N``): LLM rows, the
    plan, answers an earlier run kept in its journal when the database was away, claims of dead
    collectors on this host back to the plan, their runs marked 'interrupted'."""
    from .journal import load_journal
    from .queue import mark_interrupted_runs, release_dead_claims
    llm_ids = ensure_llms(db, spec)
    planned = plan_trials(db, spec, llm_ids)
    restored = load_journal(db)
    release_dead_claims(db)
    mark_interrupted_runs(db)
    return PreparedRun(llm_ids, planned, restored)
