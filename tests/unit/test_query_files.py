"""The named queries live in files by role under sql/, loaded into one dict by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.queue.queries import all_queries, merge, query, query_files, sql_dir


def test_every_file_of_named_queries_is_read() -> None:
    names = {path.name for path in query_files()}
    assert {"claim.sql", "settle.sql", "maintenance.sql", "schedules.sql", "registry.sql"} <= names
    assert {"control.sql", "history.sql", "dashboard.sql", "doctor.sql"} <= names
    assert "claim" in all_queries() and "settle" in all_queries()


def test_the_table_of_contents_lists_every_file() -> None:
    contents = (sql_dir() / "README.md").read_text(encoding="utf-8")
    missing = [path.name for path in query_files() if f"`{path.name}`" not in contents]
    assert missing == []


def test_a_name_defined_in_two_files_is_an_error_naming_both(tmp_path: Path) -> None:
    first = tmp_path / "a.sql"
    second = tmp_path / "b.sql"
    first.write_text("-- name: same\nSELECT 1;\n")
    second.write_text("-- name: other\nSELECT 2;\n\n-- name: same\nSELECT 3;\n")
    with pytest.raises(ValueError, match=r"sql/b.sql: query 'same' is defined in sql/a.sql too"):
        merge([first, second])
    assert merge([first]) == {"same": "SELECT 1"}


def test_an_unknown_name_says_where_it_was_looked_for() -> None:
    with pytest.raises(KeyError, match="no query named 'nowhere' in sql/"):
        query("nowhere")
