"""An agent on a batch engine's allocation: the engine's SIGTERM (preemption) ends runs as preempted."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from cloudlet.agent.config import AgentConfig, ConfigError
from cloudlet.agent.runner import SIGNAL_RACE_S, RunManager

BASE = {
    "CLOUDLET_SERVER": "http://127.0.0.1:1",
    "CLOUDLET_NODE_ID": "n1",
    "CLOUDLET_NODE_TOKEN": "t",
    "CLOUDLET_NODE_DIR": "/tmp/n1",
}


class NoCalls:
    def call(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no call expected")


def manager(tmp_path: Path, means: str | None) -> RunManager:
    runs = RunManager(NoCalls(), tmp_path, signal_means=means)  # type: ignore[arg-type]
    runs.close()
    return runs


def test_the_setting_is_read_and_checked() -> None:
    assert AgentConfig.from_env(BASE).signal_means is None
    assert AgentConfig.from_env({**BASE, "CLOUDLET_SIGNAL_MEANS": "preempted"}).signal_means == "preempted"
    with pytest.raises(ConfigError, match="CLOUDLET_SIGNAL_MEANS"):
        AgentConfig.from_env({**BASE, "CLOUDLET_SIGNAL_MEANS": "whatever"})


def test_runs_the_signal_ended_are_preempted_and_others_keep_their_reason(tmp_path: Path) -> None:
    runs = manager(tmp_path, "preempted")
    killed = 128 + signal.SIGTERM
    began = time.monotonic()
    assert runs._meant_by_signal(killed, "exited") == "exited"  # no SIGTERM to the agent: a plain kill
    assert time.monotonic() - began >= SIGNAL_RACE_S * 0.9  # it waited for the agent's handler
    runs.signalled()
    assert runs._meant_by_signal(killed, "exited") == "preempted"
    assert runs._meant_by_signal(143 - 15, "canceled") == "preempted"  # stopped by the shutdown
    assert runs._meant_by_signal(0, "exited") == "exited"  # finished as the signal came
    assert runs._meant_by_signal(killed, "timeout") == "timeout"


def test_without_the_setting_a_signal_cancels_as_before(tmp_path: Path) -> None:
    runs = manager(tmp_path, None)
    runs.signalled()
    assert runs._meant_by_signal(128 + signal.SIGTERM, "exited") == "exited"
    assert runs._meant_by_signal(143, "canceled") == "canceled"
