#!/usr/bin/env bash
# The test command (README Quick start, .ci/run): set up, then ruff, mypy and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/setup-tests.sh
echo "== ruff"; .venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy"; .venv/bin/mypy
echo "== import layers"; .venv/bin/lint-imports --no-cache
# -rfEs: the summary names every failure and error, and every skip says why. Test files run
# CLOUDLET_TEST_WORKERS at a time (default 2), each file's tests in one worker (--dist loadfile: a
# module's server fixture is made once).
echo "== pytest"; .venv/bin/pytest -q -rfEs -p no:cacheprovider -n "${CLOUDLET_TEST_WORKERS:-2}" --dist loadfile --durations=25 "$@"
