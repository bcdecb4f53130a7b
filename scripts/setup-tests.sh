#!/usr/bin/env bash
# What only the tests need, on top of scripts/setup.sh (scripts/test.sh runs both): the azure-ai-ml
# SDK for the facade's tests, PyTorch (CPU) for distributed training, OpenSSH and iproute2 for the
# SSH hosts (network namespaces), Slurm, HAProxy for a benchmark and Chromium for the browser tests.
# The Debian packages need root and apt-get; each is best effort and says what it skips. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/uv ] || ./scripts/setup.sh
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
# iproute2 (ip netns): the SSH-location tests make their hosts as network namespaces
# (tests/netns_hosts.py). Best effort, root with apt only; under CI the tests fail without it.
if ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_ip() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends iproute2; }
    install_ip >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_ip >/dev/null 2>&1; } \
      || echo "notice: iproute2 could not be installed; SSH-location tests will be skipped" >&2
  else
    echo "notice: iproute2 (ip) missing (needs root and apt-get); SSH-location tests will be skipped" >&2
  fi
fi
# Slurm 22.05 and munge for the Slurm location's tests (tests/slurm_hosts.py starts its own daemons
# in network namespaces). Best effort, root with apt only: elsewhere those tests are skipped with a
# notice; under CI (CI=true) they fail without it.
if ! command -v sbatch >/dev/null 2>&1 || [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/munged ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_slurm() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge; }
    install_slurm >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_slurm >/dev/null 2>&1; } \
      || echo "notice: slurm could not be installed; Slurm tests will be skipped (fail under CI)" >&2
  else
    echo "notice: slurm missing (needs root and apt-get); Slurm tests will be skipped" >&2
  fi
fi
# HAProxy: the online_gateway benchmark drives a real one beside cloudlet's own gateway (bench/_haproxy.py).
# Best effort, root with apt only: elsewhere that benchmark reports HAProxy as not measured.
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_haproxy() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy; }
    install_haproxy >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && install_haproxy >/dev/null 2>&1; } \
      || echo "notice: haproxy could not be installed; the online_gateway bench will not measure it" >&2
  else
    echo "notice: haproxy missing (needs root and apt-get); the online_gateway bench will not measure it" >&2
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
