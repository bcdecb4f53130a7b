#!/usr/bin/env bash
# What the main job needs (README Quick start, scripts/demo.sh): .venv with the locked dependencies
# (uv.lock), the inference server's environment for online deployments, and bubblewrap (the sandbox
# every job runs in). What only the tests need is in scripts/setup-tests.sh. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
fi
# --inexact keeps packages installed beside the lock (torch, from scripts/setup-tests.sh).
.venv/bin/uv sync --frozen --inexact --extra server --quiet --python .venv/bin/python
# The online deployments' replicas run the real azureml-inference-server-http (issue 14) in an
# environment of its own: its pins (Flask, opentelemetry, pydantic) clash with the control plane's.
# scikit-learn for the scoring scripts of the tests and examples. control/online_replicas.py finds
# it here unless $CLOUDLET_INFERENCE_PYTHON names another.
INFERENCE_VENV=.cache/inference-server-1.5.1
if ! "$INFERENCE_VENV/bin/python" -c "import azureml_inference_server_http, sklearn" 2>/dev/null; then
  .venv/bin/uv venv --quiet --python .venv/bin/python "$INFERENCE_VENV"
  .venv/bin/uv pip install --quiet --python "$INFERENCE_VENV/bin/python" \
    "azureml-inference-server-http==1.5.1" "scikit-learn>=1.5" joblib
fi
# bubblewrap: the local provider runs every node's jobs and apps in a bwrap sandbox (docs/isolation.md).
# Best effort, root with apt only: elsewhere the tests run nodes unsandboxed and skip the isolation
# tests with a notice; under CI (CI=true) the test run fails without it.
if ! command -v bwrap >/dev/null 2>&1; then
  apt_install "jobs run unsandboxed and the isolation tests are skipped (fail under CI)" bubblewrap
fi
# The control plane, its sources and the replicas' environment, byte-compiled (scripts/compile-bytecode.sh).
./scripts/compile-bytecode.sh .venv/lib src "$INFERENCE_VENV/lib"
