"""Writing results: ``bench/results/<name>.json`` and a section per benchmark in ``results/README.md``."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
README_HEADER = (
    "# Benchmark results\n\n"
    "Written by `python -m bench`; each section is replaced when its benchmark runs again.\n"
    "Raw numbers are in `<name>.json` next to this file. See `bench/README.md` for how to read them.\n"
)


def _clean(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    return value


def loadavg() -> list[float] | None:
    try:
        return [float(part) for part in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def _git_revision(repo: Path) -> dict[str, Any]:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": head or None, "src_dirty": bool(dirty)}


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "nproc": usable or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
    }


def envelope(name: str, repo: Path) -> dict[str, Any]:
    return {
        "benchmark": name,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "git": _git_revision(repo),
        "loadavg_start": loadavg(),
    }


def write_json(name: str, data: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def update_readme(name: str, section_markdown: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Replace (or append) the section between this benchmark's markers in results/README.md."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "README.md"
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{section_markdown.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else README_HEADER
    if start in text and end in text:
        before, _, rest = text.partition(start)
        _, _, after = rest.partition(end)
        text = before + block.rstrip("\n") + after
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path


def fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
