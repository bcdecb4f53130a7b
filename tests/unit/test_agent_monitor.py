"""The agent's per-run sampler (agent/monitor.py) on real processes: a busy child's CPU, a child's
memory, the process tree, and the GPU fields: absent without NVML (this machine has no GPU), present
when NVML answers (a stand-in ``pynvml`` module: the real one was tested only for its absent path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudlet.agent import monitor
from cloudlet.agent.monitor import Nvml, RunMonitor

BUSY_WITH_CHILD = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import time; held = bytearray(b\"x\") * (64 << 20); time.sleep(30)']); "
    "end = time.time() + 30; any(time.time() > end for _ in iter(int, 1))"
)


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY_WITH_CHILD], start_new_session=True)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)  # the busy launcher and its child (their own group)
    proc.wait()


def _gpu_absent() -> Nvml:
    gpu = Nvml()
    gpu._handles = []  # as after a failed import / nvmlInit
    return gpu


def test_a_runs_tree_cpu_and_memory_without_a_gpu(busy: subprocess.Popen[bytes], tmp_path: Path) -> None:
    sampler = RunMonitor(lambda: [("r1", busy.pid)], tmp_path, gpu=_gpu_absent())
    deadline = time.monotonic() + 20
    while len(monitor.process_tree(busy.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sampler.sample_once() == []  # the first look sets the baseline
    memory = 0.0
    while time.monotonic() < deadline and memory < 64 * 2**20:
        time.sleep(1.0)
        (sample,) = sampler.sample_once()
        memory = sample["memory_bytes"]
    # The child's 64 MiB counts (the tree, not the launcher alone), once: two interpreters add ~20 MiB.
    assert 64 * 2**20 <= memory <= 104 * 2**20, memory / 2**20
    assert 0 < sample["cpu_percent"] <= 110
    assert sample["gpu"] is False and not any(k.startswith("gpu_") for k in sample)
    assert {s["run"] for s in sampler.take()} == {"r1"}


def test_the_buffer_is_taken_once_and_a_failed_poll_gives_it_back(
    busy: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    sampler = RunMonitor(lambda: [("r1", busy.pid)], tmp_path, gpu=_gpu_absent())
    sampler.sample_once(now=1.0)
    sampler.sample_once(now=2.0)
    taken = sampler.take()
    assert len(taken) == 1 and sampler.take() == []
    sampler.give_back(taken)
    assert sampler.take() == taken


def test_nvml_absent_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    gpu = Nvml()
    assert gpu.read() is None and "no GPU" in gpu.reason


def test_nvml_present_reports_utilisation_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake: Any = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=[10, 30][h])
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2**30)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert Nvml().read() == {"gpu_percent": 20.0, "gpu_memory_bytes": 2.0 * 2**30, "gpu_count": 2.0}
