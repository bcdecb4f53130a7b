#!/usr/bin/env bash
# What only the tests need, on top of scripts/setup.sh (scripts/test.sh runs both): the azure-ai-ml
# SDK for the facade's tests, PyTorch (CPU) for distributed training, OpenSSH and iproute2 for the
# SSH hosts (network namespaces), Slurm, HAProxy for a benchmark, Prometheus for the scrape test and
# Chromium for the browser tests.
# The Debian packages need root and apt-get; each is best effort and says what it skips. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/uv ] || ./scripts/setup.sh
. scripts/apt.sh
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
  apt_install "SSH tests will be skipped" openssh-server
fi
# iproute2 (ip netns): the SSH-location tests make their hosts as network namespaces
# (tests/netns_hosts.py). Best effort, root with apt only; under CI the tests fail without it.
if ! command -v ip >/dev/null 2>&1; then
  apt_install "SSH-location tests will be skipped (fail under CI)" iproute2
fi
# Slurm 22.05 and munge for the Slurm location's tests (tests/slurm_hosts.py starts its own daemons
# in network namespaces). Best effort, root with apt only: elsewhere those tests are skipped with a
# notice; under CI (CI=true) they fail without it.
if ! command -v sbatch >/dev/null 2>&1 || [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/munged ]; then
  apt_install "Slurm tests will be skipped (fail under CI)" slurmctld slurmd slurm-client munge
fi
# HAProxy: the online_gateway benchmark drives a real one beside cloudlet's own gateway (bench/_haproxy.py),
# and tests/integration/test_reverse_proxy.py puts one in front of the server (a skip without it, a failure under CI).
# Best effort, root with apt only: elsewhere that benchmark reports HAProxy as not measured.
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  apt_install "the online_gateway bench will not measure HAProxy, nor the reverse-proxy test run" haproxy
fi
# Prometheus (Debian's 2.42): tests/integration/test_prometheus.py starts its binary to scrape a server
# (never the Debian service). Best effort, root with apt only: elsewhere that test is skipped with a
# notice; under CI (CI=true) it fails without it.
if ! command -v prometheus >/dev/null 2>&1 && [ ! -x /usr/bin/prometheus ]; then
  apt_install "the Prometheus scrape test will be skipped (fails under CI)" prometheus
fi
# Chromium for the browser tests (Playwright drives /usr/bin/chromium; never `playwright install`).
# Best effort, root with apt only: elsewhere the browser tests are skipped with a notice.
if [ ! -x /usr/bin/chromium ]; then
  APT_WITH_RECOMMENDS=1 apt_install "browser tests will be skipped" chromium
fi
# PyTorch (above) and the SDK's venv, byte-compiled (scripts/compile-bytecode.sh).
./scripts/compile-bytecode.sh .venv/lib "$AZUREML_VENV/lib"
