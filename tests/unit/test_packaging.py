"""What the wheel installs, and the clash with supervisord's package of the same import name."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import supervisor
from tests.commands import ROOT


def sql_roles() -> list[str]:
    return sorted(path.name for path in (ROOT / "sql").glob("*.sql"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("pgq_supervisor-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_only_the_supervisor_package(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"supervisor", f"pgq_supervisor-{supervisor.__version__}.dist-info"}
    assert "supervisor/py.typed" in names
    # Every file of named queries (sql/README.md lists them by role).
    for role in sql_roles():
        assert f"supervisor/sql/{role}" in names
    assert "supervisor/sql/migrations/0005_control.sql" in names
    # Every function's file (migrate applies them after the migrations) and the schema file.
    functions = sorted(path.name for path in (ROOT / "sql" / "functions").glob("*.sql"))
    assert functions and all(f"supervisor/sql/functions/{name}" in names for name in functions)
    assert "supervisor/sql/schema.sql" in names
    # Every package of the source tree (a room added to supervisor/ must be listed in pyproject).
    packages = {
        str(init.parent.relative_to(ROOT)) for init in (ROOT / "supervisor").rglob("__init__.py")
    }
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set()
    assert "supervisor/testing.py" in names
    # The dashboard's SQL, templates and vendored htmx (a page without them renders nothing).
    assert "supervisor/sql/dashboard.sql" in names
    assert "supervisor/sql/doctor.sql" in names
    assert "supervisor/doctor/horizon.py" in names
    assert "supervisor/web/templates/overview.html" in names
    assert "supervisor/web/static/htmx.min.js" in names
    # The charts' library (uPlot, vendored from npm: no network at run time) and its licence.
    for vendored in ("uplot.min.js", "uplot.min.css", "uplot.LICENSE.txt", "charts.js"):
        assert f"supervisor/web/static/{vendored}" in names, vendored
    assert "supervisor/sql/charts.sql" in names and "supervisor/sql/operator.sql" in names
    # /jobs' SQL, the optional args index, the editors' JSON Schema.
    assert "supervisor/sql/dashboard_jobs.sql" in names
    assert "supervisor/sql/optional/jobs_args_index.sql" in names
    assert "supervisor/config/pgq-supervisor.schema.json" in names
    dist_info = f"pgq_supervisor-{supervisor.__version__}.dist-info"
    assert any(n.startswith(f"{dist_info}/licenses/LICENSE") for n in names)
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert f"Version: {supervisor.__version__}" in metadata  # one place for the version
    # What PyPI shows: classifiers, project URLs, the extras.
    assert "Classifier: Topic :: Database" in metadata
    assert "Project-URL: Documentation," in metadata
    assert "Provides-Extra: otel" in metadata and "Provides-Extra: docs" in metadata


def test_supervisord_in_the_same_environment_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "supervisor-4.2.5.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: supervisor\nVersion: 4.2.5\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    for code in ("import supervisor", "import supervisor.cli"):
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
        )
        assert run.returncode == 1
        assert "supervisord (the 'supervisor' distribution) are installed" in run.stderr
        assert "separate environments" in run.stderr
        assert "found: supervisor 4.2.5" in run.stderr


def test_an_overwritten_package_init_is_named(tmp_path: Path) -> None:
    """supervisord installed after us replaces supervisor/__init__.py; our command says so."""
    package = tmp_path / "supervisor"
    package.mkdir()
    (package / "__init__.py").write_text("# this is a package\n")
    for room in ("cli", "clash.py"):
        (package / room).symlink_to(ROOT / "supervisor" / room)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", "import supervisor.cli"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 1
    assert "supervisor/__init__.py is not ours" in run.stderr
