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
# --inexact keeps packages installed beside the lock (torch below).
.venv/bin/uv sync --frozen --inexact --extra server --quiet --python .venv/bin/python
# The official azure-ai-ml SDK in a venv of its own, for the Azure ML facade's tests
# (tests/azureml_helpers.py, which makes it the same way when missing).
AZUREML_VENV=.cache/azure-ai-ml-1.35.2
if ! "$AZUREML_VENV/bin/python" -c "import azure.ai.ml, azure.identity" 2>/dev/null; then
  .venv/bin/uv venv --quiet --python .venv/bin/python "$AZUREML_VENV"
  .venv/bin/uv pip install --quiet --python "$AZUREML_VENV/bin/python" "azure-ai-ml==1.35.2" azure-identity
fi
# PyTorch (CPU) for the distributed-training tests and examples: pip takes the CPU wheel these
# machines keep on disk (uv would fetch a multi-GB CUDA build). Best effort: without it those
# tests are skipped with a notice.
if [ -z "${CLOUDLET_SKIP_TORCH:-}" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" 2>/dev/null \
    || echo "notice: torch==2.13.0 could not be installed; distributed-training tests will be skipped" >&2
fi
# OpenSSH server for compute-instance SSH (tests start their own sshd on loopback). Best effort,
# root with apt only: elsewhere the SSH tests are skipped with a notice.
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_sshd() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server; }
    install_sshd >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_sshd >/dev/null 2>&1; } \
      || echo "notice: openssh-server could not be installed; SSH tests will be skipped" >&2
  else
    echo "notice: openssh-server missing (needs root and apt-get); SSH tests will be skipped" >&2
  fi
fi
# bubblewrap: the local provider runs every node's jobs and apps in a bwrap sandbox (docs/isolation.md).
# Best effort, root with apt only: elsewhere the tests run nodes unsandboxed and skip the isolation
# tests with a notice; under CI (CI=true) the test run fails without it.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_bwrap() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap; }
    install_bwrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_bwrap >/dev/null 2>&1; } \
      || echo "notice: bubblewrap could not be installed; isolation tests will be skipped (fail under CI)" >&2
  else
    echo "notice: bubblewrap (bwrap) missing (needs root and apt-get); isolation tests will be skipped" >&2
  fi
fi
# Chromium for the browser tests (Playwright drives /usr/bin/chromium; never `playwright install`).
# Best effort, root with apt only: elsewhere the browser tests are skipped with a notice.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_chromium() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
    install_chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_chromium >/dev/null 2>&1; } \
      || echo "notice: chromium could not be installed; browser tests will be skipped" >&2
  else
    echo "notice: /usr/bin/chromium missing (needs root and apt-get); browser tests will be skipped" >&2
  fi
fi
