"""The ``jhub-gpubooking`` admin command line."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from db_test_times import NOW

from jhub_gpubooking.cli import format_table, main, pools_from_config
from jhub_gpubooking.db.session import current_revision, head_revision

CONFIG = """
c = get_config()  # noqa
c.GPUBookingService.db_url = "sqlite:///ignored-by-the-cli.sqlite"
c.GPUBookingService.pools = [
    {"name": "a100", "display_name": "A100 80GB", "nodes": {"gpu-1": 4, "gpu-2": 4}},
    {"name": "t4", "nodes": {"gpu-3": 2}, "slices_per_gpu": 4, "backend": "hami"},
]
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_format_table_aligns_columns():
    assert format_table(("ID", "USER"), [(1, "alice"), (12, "bo")]) == (
        "ID  USER\n1   alice\n12  bo"
    )


def test_db_current_and_upgrade(capsys, db_url):
    code, out, _ = run(capsys, "db", "current", "--db-url", db_url)
    assert code == 0
    assert out == f"none (empty database; run: jhub-gpubooking db upgrade --db-url {db_url})\n"
    code, out, _ = run(capsys, "db", "upgrade", "--db-url", db_url)
    assert code == 0
    assert out.endswith(f"is at schema revision {head_revision()} (head).\n")
    assert current_revision(db_url) == head_revision()
    assert run(capsys, "db", "current", "--db-url", db_url)[1] == f"{head_revision()} (head)\n"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_db_downgrade_one_step_and_back(capsys, db_url):
    assert run(capsys, "db", "upgrade", "--db-url", db_url)[0] == 0
    code, out, _ = run(capsys, "db", "downgrade", "-1", "--db-url", db_url)
    assert code == 0
    previous = current_revision(db_url)
    assert previous is not None and previous != head_revision()
    assert f"is at schema revision {previous};" in out
    assert run(capsys, "db", "current", "--db-url", db_url)[1].startswith(f"{previous} (head is ")
    code, _, err = run(capsys, "db", "downgrade", "nonsense", "--db-url", db_url)
    assert code == 1 and err.startswith("jhub-gpubooking: ") and "nonsense" in err
    assert run(capsys, "db", "upgrade", "--db-url", db_url)[0] == 0


def test_db_url_defaults_to_the_environment(capsys, monkeypatch, tmp_path):
    url = f"sqlite:///{tmp_path / 'from-env.sqlite'}"
    monkeypatch.setenv("GPUBOOKING_DB_URL", url)
    assert run(capsys, "db", "upgrade")[0] == 0
    assert current_revision(url) == head_revision()


def test_bookings_list_refuses_a_stale_schema(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    code, out, err = run(capsys, "bookings", "list", "--db-url", url)
    assert (code, out) == (1, "")
    assert "has no schema yet" in err
    assert f"jhub-gpubooking db upgrade --db-url {url}" in err


#: The CLI's output does not depend on the backend, so these run on SQLite only.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@sqlite_only
def test_bookings_list_prints_a_filtered_table(capsys, store, migrated_url):
    start = NOW.replace(minute=0) + timedelta(hours=1)
    first = store.create("alice", "a100", 2, start, start + timedelta(hours=1))
    store.create("bob", "t4", "1/4", start, start + timedelta(hours=2))
    cancelled = store.create("alice", "t4", "1/2", start, start + timedelta(hours=1))
    store.cancel(cancelled.id, actor="admin")
    code, out, _ = run(capsys, "bookings", "list", "--user", "alice", "--db-url", migrated_url)
    assert code == 0
    assert (
        out
        == format_table(
            ("ID", "USER", "POOL", "GPUS", "START", "END", "STATE", "PLACEMENT", "SERVER"),
            [
                (
                    first.id,
                    "alice",
                    "a100",
                    "2",
                    "2030-01-07T11:00:00Z",
                    "2030-01-07T12:00:00Z",
                    "upcoming",
                    "node-a/0,1",
                    "-",
                ),
                (
                    cancelled.id,
                    "alice",
                    "t4",
                    "0.5",
                    "2030-01-07T11:00:00Z",
                    "2030-01-07T12:00:00Z",
                    "cancelled",
                    "node-c/0",
                    "-",
                ),
            ],
        )
        + "\n"
    )
    out = run(capsys, "bookings", "list", "--state", "cancelled", "--db-url", migrated_url)[1]
    assert [line.split()[0] for line in out.splitlines()[1:]] == [str(cancelled.id)]


def test_pools_list_reads_the_service_config_file(capsys, tmp_path):
    config_file = tmp_path / "jhub_gpubooking_service_config.py"
    config_file.write_text(CONFIG)
    assert [pool.name for pool in pools_from_config(str(config_file))] == ["a100", "t4"]
    code, out, _ = run(capsys, "pools", "list", "--config", str(config_file))
    assert code == 0
    assert (
        out
        == format_table(
            ("NAME", "DISPLAY NAME", "BACKEND", "GPUS", "SLICES/GPU", "NODES"),
            [
                ("a100", "A100 80GB", "whole", 8, 1, "gpu-1:4, gpu-2:4"),
                ("t4", "t4", "hami", 2, 4, "gpu-3:2"),
            ],
        )
        + "\n"
    )


@sqlite_only
def test_pools_list_without_config_shows_the_synced_pools(
    capsys, store, migrated_url, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)  # no default config file here
    out = run(capsys, "pools", "list", "--db-url", migrated_url)[1]
    assert [line.split()[0] for line in out.splitlines()] == ["NAME", "a100", "t4"]


def test_a_broken_pool_config_is_one_sentence(capsys, tmp_path):
    config_file = tmp_path / "bad.py"
    config_file.write_text('c.GPUBookingService.pools = [{"name": "x", "nodes": {}}]\n')
    code, _, err = run(capsys, "pools", "list", "--config", str(config_file))
    assert (code, err) == (1, "jhub-gpubooking: Pool x: 'nodes' must name at least one node.\n")


def test_console_script_is_installed(tmp_path):
    script = Path(sys.executable).parent / "jhub-gpubooking"
    url = f"sqlite:///{tmp_path / 'console.sqlite'}"
    done = subprocess.run(
        [str(script), "db", "upgrade", "--db-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert current_revision(url) == head_revision()
