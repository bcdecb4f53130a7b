"""The Slurm provider's pure parts: its sbatch line, its reading of squeue and sinfo, its config."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.providers import slurm_commands as sc
from cloudlet.providers.base import NodeHandle, ProviderError
from cloudlet.providers.registry import REGISTRY, ProviderContext
from cloudlet.providers.slurm import SlurmConfig, SlurmProvider
from cloudlet.providers.slurm_runner import remote_command


def test_sbatch_asks_for_one_node_with_the_sizes_resources_and_tags_it() -> None:
    argv = sc.sbatch_argv(
        "n1",
        "inst",
        1.5,
        3.5,
        2,
        sc.Placement("gpu", "ml", "high"),
        "/shared/n1",
        "/shared/n1/placeholder.sh",
        "2:00:00",
    )
    assert argv[0] == "sbatch" and argv[-1] == "/shared/n1/placeholder.sh"
    for flag in (
        "--nodes=1",
        "--cpus-per-task=2",  # whole CPUs, rounded up
        "--mem=3584M",
        "--gres=gpu:2",
        "--partition=gpu",
        "--account=ml",
        "--qos=high",
        "--time=2:00:00",
        "--job-name=cloudlet-n1",
        "--comment=cloudlet:inst:n1",
        "--export=NONE",
    ):
        assert flag in argv, flag
    plain = sc.sbatch_argv("n2", "inst", 1, 1, 0, sc.Placement("cpu"), "/d", "/d/s.sh")
    assert not [a for a in plain if a.startswith(("--gres", "--account", "--qos", "--time"))], plain


def test_squeue_lines_become_our_placeholders_only() -> None:
    out = "\n".join(
        [
            "12|cloudlet-n1|cloudlet:inst:n1|RUNNING|None|urgent|0|slurm1|",
            "13|cloudlet-n2|cloudlet:inst:n2|PENDING|Resources|urgent|0||",
            "14|wrap|(null)|RUNNING|None|urgent|0|slurm2|",  # somebody else's
            "15|cloudlet-n3|cloudlet:other:n3|PENDING|Priority|lowpri|0||",  # another installation's
            "16|cloudlet-n4|cloudlet:inst:n4|PENDING|BeginTime|lowpri|1||",
        ]
    )
    jobs = {j.node_id: j for j in sc.parse_squeue(out)}
    assert set(jobs) == {"n1", "n2", "n3", "n4"}
    assert jobs["n1"].reason == "" and jobs["n1"].nodelist == "slurm1" and jobs["n1"].job_id == "12"
    assert jobs["n3"].installation_id == "other"
    assert sc.job_phase(jobs["n1"].state, jobs["n1"].restarts) == "running"
    assert sc.job_phase(jobs["n2"].state, jobs["n2"].restarts) == "pending"
    assert sc.job_phase(jobs["n4"].state, jobs["n4"].restarts) == "preempted"  # requeued once
    assert sc.job_phase("PREEMPTED", 0) == "preempted"
    assert sc.job_phase("COMPLETED", 0) == "ended"


def test_a_pending_reason_is_said_in_slurms_words_and_ours() -> None:
    assert sc.pending_message("Resources").startswith("Slurm has the allocation pending: Resources (")
    assert "per-user CPU limit" in sc.pending_message("QOSMaxCpuPerUserLimit")
    assert sc.pending_message("SomethingNew") == "Slurm has the allocation pending: SomethingNew"


def test_sinfo_capacity_counts_usable_nodes_once() -> None:
    out = "\n".join(
        [
            "slurm1|2|8000|(null)|idle",
            "slurm1|2|8000|(null)|idle",  # the same node in a second partition
            "slurm2|4|16000|gpu:a100:2(S:0-1)|mix",
            "slurm3|8|32000|gpu:4|down*",
        ]
    )
    offer = sc.parse_sinfo_nodes(out)
    assert (offer.cpus, offer.gpus) == (6, 2) and offer.memory_gb == pytest.approx(24000 / 1024)


def test_sbatch_job_id_and_the_env_file_quote_what_they_carry() -> None:
    assert sc.parse_job_id("4242\n") == "4242" and sc.parse_job_id("17;cluster\n") == "17"
    with pytest.raises(ValueError):
        sc.parse_job_id("sbatch: error: Batch job submission failed")
    text = sc.env_file_text({"A": "x y", "B": "it's", "bad-name": "z"})
    assert text == "A='x y'\nB='it'\"'\"'s'\n"
    assert "exec /opt/py/bin/python -m cloudlet.agent" in sc.batch_script(
        "/opt/py/bin/python", "/d/agent.env"
    )


def test_the_slurm_config_is_closed_and_checked() -> None:
    ok = REGISTRY.normalized("slurm", {"partition": "batch", "low_priority_partition": "scavenger"})
    assert ok == {"partition": "batch", "low_priority_partition": "scavenger"}
    for config, target in (
        ({}, "config.partition"),
        ({"partition": "a b"}, "config.partition"),
        ({"partition": "p", "nodes_dir": "rel"}, "config.nodes_dir"),
        ({"partition": "p", "queue": "x"}, "config.queue"),
        ({"partition": "p", "login": {"address": "h", "password": "x"}}, "config.login.password"),
        ({"partition": "p", "login": {"address": "h"}}, "config"),  # nodes_dir, python: the cluster's
    ):
        with pytest.raises(CloudletError) as caught:
            REGISTRY.validate("slurm", config)
        assert caught.value.target == target, (config, caught.value.target)


def test_low_priority_takes_the_preemptible_partition_and_qos(tmp_path: Path) -> None:
    config = SlurmConfig(
        partition="batch", qos="normal", low_priority_partition="scav", low_priority_qos="low"
    )
    provider = SlurmProvider(config, tmp_path)
    assert provider.placement("low_priority") == sc.Placement("scav", None, "low")
    assert provider.placement("dedicated") == sc.Placement("batch", None, "normal")
    built = REGISTRY.build("slurm", {"partition": "batch"}, ProviderContext(tmp_path, "inst"))
    assert isinstance(built, SlurmProvider) and built.root == tmp_path / "slurm-nodes"


def test_node_status_reads_the_listed_state(tmp_path: Path) -> None:
    provider = SlurmProvider(SlurmConfig(partition="batch"), tmp_path)

    def status(state: str, reason: str = "", restarts: int = 0) -> tuple[str, str] | None:
        ref = {"job_id": "9", "slurm_state": state, "reason": reason, "restarts": restarts}
        found = provider.node_status(NodeHandle("n", ref))
        return None if found is None else (found.phase, found.message)

    assert status("PENDING", "Priority") == ("pending", sc.pending_message("Priority"))
    assert status("RUNNING") == ("running", "")
    assert status("PENDING", "BeginTime", 1) == (
        "preempted",
        "Slurm preempted the allocation (job 9 requeued)",
    )
    assert status("") is None


def test_a_login_node_runs_slurms_commands_quoted_with_its_conf() -> None:
    line = remote_command(["sbatch", "--comment=a b", "/d/s.sh"], "/opt/slurm/bin", "/etc/sl urm.conf")
    assert line == "SLURM_CONF='/etc/sl urm.conf' /opt/slurm/bin/sbatch '--comment=a b' /d/s.sh"
    assert remote_command(["rm", "-rf", "--", "/d/x y"], "/opt/slurm/bin", None) == "rm -rf -- '/d/x y'"


def test_an_unreachable_login_node_is_a_provider_error_naming_it(tmp_path: Path) -> None:
    login = {"address": "127.0.0.1", "port": 1, "identity_file": str(tmp_path / "key")}
    config = SlurmConfig.model_validate(
        {"partition": "batch", "login": login, "nodes_dir": "/shared/n", "python": "/usr/bin/python3"}
    )
    with pytest.raises(ProviderError, match=r"cannot reach the Slurm login node root@127\.0\.0\.1"):
        SlurmProvider(config, tmp_path).list_nodes("inst")
