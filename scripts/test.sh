#!/usr/bin/env bash
# The test command (README Quick start, .ci/run): set up, then ruff, mypy and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; .venv/bin/pytest -q -rs -p no:cacheprovider "$@"  # -rs: every skip says why
