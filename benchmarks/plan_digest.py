"""Digest of every planned request (key, messages, facts, gold, options, labels) of both designs at
their defaults, for checking that a refactoring leaves the stimuli unchanged.

    python benchmarks/plan_digest.py            # prints one SHA-256 per design

Design B: the 500-world bank (seed 0) under C0..C4; Design A: the built-in bank at seed 0 with the
sources the default plan uses.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa


def digest(engine: sa.Engine, design: str) -> tuple[int, str]:
    try:
        from discern_stats.store.db import Request
    except ImportError:  # before the store room
        from discern_stats.db import Request
    cols = [c for c in Request.__table__.c if c.name not in ("id", "created_at")]
    h = hashlib.sha256()
    n = 0
    with engine.connect() as conn:
        for row in conn.execute(sa.select(*cols).where(Request.design == design).order_by(Request.key)):
            h.update(repr(tuple(row)).encode())
            n += 1
    return n, h.hexdigest()


def main() -> int:
    import discern_stats as ds
    from discern_stats.designs import design_cue, design_l2d
    with tempfile.TemporaryDirectory() as tmp:
        db = ds.TrialDB(f"sqlite:///{Path(tmp) / 'plan.db'}")
        design_cue(db.engine, seed=0, interventions=["C0", "C1", "C2", "C3", "C4"])
        design_l2d(db.engine, seed=0, fictional_sources=True)
        for design in ("cue", "l2d"):
            n, h = digest(db.engine, design)
            print(f"{design}: {n:,} requests, sha256 {h}")
        db.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
