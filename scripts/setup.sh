#!/usr/bin/env bash
# Create .venv and install the locked dependencies (uv.lock). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
fi
.venv/bin/uv sync --frozen --quiet --python .venv/bin/python
