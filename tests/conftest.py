"""Shared fixtures: a fresh SQLite database and a fresh PostgreSQL database per test."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("DISCERN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
LIN_CSV = SHARED / "data" / "lin2023_domain_pc1.csv"


def _pg_available() -> bool:
    try:
        import psycopg
        with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", connect_timeout=3):
            return True
    except Exception:
        return False


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'trials.db'}"


@pytest.fixture
def pg_url():
    """A brand-new PostgreSQL database, dropped afterwards."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL on 127.0.0.1:5432 is required in CI but is not reachable")
        pytest.skip("PostgreSQL on 127.0.0.1:5432 not reachable")
    import psycopg
    name = f"ds_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # name is generated here, never user input
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def any_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'trials.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def lin_csv() -> Path:
    if not LIN_CSV.exists():
        pytest.skip("../shared/data/lin2023_domain_pc1.csv is not present in this checkout")
    return LIN_CSV
