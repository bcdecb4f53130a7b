"""``cloudlet compute what-if`` as a user runs it: tables, JSON, the plot, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cloudlet.cli.main import app

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = DATA / "whatif_small.csv"  # hand-checked in tests/unit/test_sim_whatif.py
PHILLY_HEAD = DATA / "philly_head2000.csv"  # the first 2,000 rows of shared/traces/philly.csv
PHILLY = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly.csv"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def as_json(*args: str) -> dict[str, Any]:
    result = cli("-o", "json", "compute", "what-if", *args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_small_trace_table_and_json() -> None:
    base = (
        "--trace",
        str(SMALL),
        "--size",
        "Standard_DS3_v2",
        "--max",
        "2",
        "--idle",
        "600",
        "--boot",
        "120",
    )
    table = cli("-o", "table", "compute", "what-if", *base)
    assert table.exit_code == 0, table.output
    for label in ("cost", "node-hours", "queue wait p95", "idle waste", "preemption losses"):
        assert label in table.stdout
    assert "$0.9962" in table.stdout or "$1.00" in table.stdout  # 3.4 node-h × $0.293
    (one,) = as_json(*base)["settings"]
    assert one["node_hours"] == pytest.approx(3.4) and one["cost"] == pytest.approx(1.0, abs=0.01)
    assert one["wait_p50_s"] == 120 and one["wait_p95_s"] == pytest.approx(1740)


def test_settings_side_by_side_from_repeated_flags_and_setting_strings() -> None:
    common = ("--trace", str(SMALL), "--size", "Standard_DS3_v2", "--idle", "600")
    repeated = as_json(*common, "--max", "1", "--max", "2", "--tier", "dedicated", "--tier", "low_priority")
    assert [(s["max_nodes"], s["tier"]) for s in repeated["settings"]] == [
        (1, "dedicated"),
        (2, "low_priority"),
    ]
    strings = as_json(*common, "--setting", "max=2", "--setting", "max=2,idle=0,tier=low_priority,rate=0")
    first, second = strings["settings"]
    assert (first["idle_s"], second["idle_s"]) == (600, 0)
    assert second["price_per_node_hour"] < first["price_per_node_hour"]


def test_philly_head_with_a_plot(tmp_path: Path) -> None:
    png = tmp_path / "what-if.png"
    args = ["--trace", str(PHILLY_HEAD), "--size", "Standard_NC4as_T4_v3", "--idle", "600"]
    args += ["--setting", "max=32", "--setting", "max=64", "--setting", "max=64,tier=low_priority"]
    result = subprocess.run(
        [sys.executable, "-m", "cloudlet", "compute", "what-if", *args, "--plot", str(png), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["jobs"] == 2000 and len(doc["settings"]) == 3
    for setting in doc["settings"]:
        assert setting["cost"] > 0 and setting["jobs_completed"] + setting["jobs_given_up"] == 2000
    assert doc["settings"][2]["preemptions"] > 0
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000


@pytest.mark.skipif(not PHILLY.exists(), reason="shared/traces/philly.csv is not beside the repository")
def test_the_full_philly_trace_loads_with_its_columns_mapped() -> None:
    doc = as_json("--trace", str(PHILLY), "--size", "Standard_NC4as_T4_v3", "--max", "64", "--limit", "500")
    assert doc["columns"] == {"submit": "timestamp", "duration": "duration", "gpus": "num_gpus"}
    assert doc["jobs"] == 500 and doc["rows_skipped"] == {}


DS3 = ["--trace", str(SMALL), "--size", "Standard_DS3_v2"]
TWO_THREE = ["--max", "1", "--max", "2", "--idle", "1", "--idle", "2", "--idle", "3"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--trace", "/nonexistent.csv", "--size", "Standard_DS3_v2", "--max", "2"], "--trace"),
        (["--trace", str(SMALL), "--size", "Standard_Nope", "--max", "2"], "--size Standard_Nope"),
        ([*DS3, "--min", "3", "--max", "2"], "--min 3 is above --max 2"),
        (DS3, "--max"),
        ([*DS3, "--max", "2", "--tier", "spot"], "--tier"),
        ([*DS3, "--max", "two"], "--max 'two'"),
        ([*DS3, "--setting", "maxx=2"], "--setting"),
        (["--trace", str(PHILLY_HEAD), "--size", "Standard_DS3_v2", "--max", "2"], "has no GPUs"),
        ([*DS3, *TWO_THREE], "--max is given 2 times but there are 3 settings"),
        ([*DS3, "--max", "2", "--time-scale", "0"], "--time-scale"),
    ],
)
def test_bad_input_names_the_flag_and_fails(args: list[str], expected: str) -> None:
    result = cli("compute", "what-if", *args)
    assert result.exit_code != 0
    assert expected in " ".join(result.output.split()), result.output


def test_bad_column_names_the_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("when,how_long\n0,5\n")
    result = cli("compute", "what-if", "--trace", str(bad), "--size", "Standard_DS3_v2", "--max", "2")
    assert result.exit_code == 2
    assert "no submit column" in " ".join(result.output.split())


def test_help_explains_the_settings() -> None:
    result = cli("compute", "what-if", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--setting" in text and "repeat flags" in text and "num_gpus" in text
