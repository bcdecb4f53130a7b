"""Issue 30: the node's launcher (nodekit/launcher.py) runs every job run of a node in one sandbox,
each run in mount and PID namespaces of its own. Two runs of the one launcher cannot see each
other's files or signal each other's processes; a run's daemonised leftovers die when it ends; a
killed launcher's runs end as lost and the next run starts on a new launcher; a launcher that
cannot start leaves the node on a bwrap per run. Real launchers, real processes, as root (the
agent's privileged path); the server-level check kills a real node's launcher under a job."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import cloudlet
from cloudlet.agent import launcher_client
from cloudlet.agent.launcher_client import LaunchedRun, LauncherClient, LauncherUnavailable, node_launcher
from cloudlet.nodekit import launcher
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox
from tests.conftest import RunningServer
from tests.jobs_helpers import (
    create_compute,
    job,
    log_text,
    nodes,
    processes_with_env,
    served,
    submit,
    wait_job,
    wait_until,
)

if shutil.which("bwrap") is None or os.geteuid() != 0:
    pytestmark = pytest.mark.skip(
        reason="the launcher tests need bwrap and root (the agent's privileged path)"
    )

SANDBOX_UID = 65534
PATH = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(Policy(mode="bwrap"), hostname="n-launcher", state_dir=tmp_path / "state")


@pytest.fixture
def client(box: Sandbox) -> Iterator[LauncherClient]:
    started = LauncherClient(box)
    started.start()
    yield started
    started.close()


def run_dir(tmp_path: Path, name: str) -> Path:
    """A run's working directory, as the agent makes it: under a root-only node folder."""
    (tmp_path / "work").mkdir(mode=0o700, exist_ok=True)
    path = tmp_path / "work" / name
    path.mkdir()
    os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


def launch(client: LauncherClient, cwd: Path, command: str) -> LaunchedRun:
    return client.launch(["bash", "-c", command], cwd=cwd, env=PATH, binds=[Bind(str(cwd), True)])


def finish(run: LaunchedRun) -> tuple[int, str]:
    assert run.stdout is not None
    text = run.stdout.read().decode()
    run.stdout.close()
    return run.wait(30), text


def marked(marker: str) -> list[int]:
    """Host pids whose command line names ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def user_process(run: LaunchedRun) -> int:
    """The host pid of the run's user process: the child of its PID 1."""
    with open(f"/proc/{run.pid}/task/{run.pid}/children") as f:
        [child] = f.read().split()
    return int(child)


def test_two_runs_of_one_launcher_cannot_see_or_signal_each_other(
    client: LauncherClient, tmp_path: Path
) -> None:
    first, second = run_dir(tmp_path, "first"), run_dir(tmp_path, "second")
    suffix = uuid.uuid4().hex[:8]
    marker = "cloudlet-marker-" + suffix
    holder = launch(client, first, f"echo mine > mine.txt; echo ready; exec -a {marker} sleep 60")
    assert holder.stdout is not None and holder.stdout.read(6) == b"ready\n"
    [victim] = marked(marker)
    assert victim == user_process(holder)
    # What the second run tries: the first run's file and folder, its processes by host pid and
    # by name, and every process it may signal (kill -1).
    probe = (
        f"cat {first}/mine.txt 2>&1; ls {first} 2>&1; echo work: $(ls {tmp_path / 'work'}); "
        # (the marker put together at run time, so that no command line of this run holds it)
        f"M=cloudlet-marker; M=$M-{suffix}; for f in /proc/[0-9]*/cmdline; do "
        'read -r -d "" c < $f; case "$c" in *"$M"*) echo SEEN $f;; esac; done; '
        f"kill -TERM {victim} 2>&1 || echo kill refused; kill -KILL {holder.pid} 2>&1 || echo kill refused; "
        "echo pids: $(ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '); "
        "cat /proc/1/environ > /dev/null 2>&1 || echo reaper unreadable; "
        "sleep 30 & kill -9 -1; echo survived"
    )
    code, text = finish(launch(client, second, probe))
    assert "mine" not in text.replace("mine.txt", "") and "SEEN" not in text, text
    assert text.count("No such file or directory") == 2, text  # its file and its folder: absent
    assert f"work: {second.name}\n" in text, text  # the parent folder is scaffolding: its own run only
    assert text.count("kill refused") == 2, text
    assert "reaper unreadable" in text, text  # its PID 1 holds a copy of the launcher's memory
    pids = [int(p) for p in text.split("pids:")[1].split() if p.isdigit()]
    assert max(pids) < 50 and 1 in pids, text  # its own PID namespace: a handful of its own
    assert code in (0, 128 + signal.SIGKILL), (code, text)
    # The first run is untouched, and its file is there on the host.
    assert holder.poll() is None and marked(marker) == [victim]
    assert (first / "mine.txt").read_text() == "mine\n"
    holder.send_signal(signal.SIGTERM)
    assert finish(holder)[0] == 128 + signal.SIGTERM


def test_the_system_folders_and_read_only_binds_are_read_only_mounts(
    client: LauncherClient, tmp_path: Path
) -> None:
    """(The sandbox user could not write them anyway: the mounts are read-only as well.)"""
    cwd, data = run_dir(tmp_path, "ro"), tmp_path / "data"
    data.mkdir()
    binds = [Bind(str(cwd), True), Bind(str(data), False)]
    command = "while read -r _ _ _ _ point options _; do echo $point $options; done < /proc/self/mountinfo"
    run = client.launch(["bash", "-c", command], cwd=cwd, env=PATH, binds=binds)
    code, text = finish(run)
    options = {line.split()[0]: line.split()[1].split(",")[0] for line in text.splitlines()}
    assert code == 0, text
    for point in ("/usr", "/etc", "/etc/passwd", "/proc/sys", str(data)):
        assert options.get(point) == "ro", (point, text)
    for point in ("/tmp", "/dev/shm", str(cwd)):
        assert options.get(point) == "rw", (point, text)


def test_a_runs_leftover_daemon_dies_when_the_run_ends(client: LauncherClient, tmp_path: Path) -> None:
    marker = "cloudlet-daemon-" + uuid.uuid4().hex[:8]
    command = f"(setsid bash -c 'exec -a {marker} sleep 300' &) ; sleep 0.2; echo left it"
    run = launch(client, run_dir(tmp_path, "daemon"), command)
    code, text = finish(run)
    assert code == 0 and "left it" in text, text
    wait_until(lambda: not marked(marker), 10, "the run's leftover daemon to die with it")


def test_a_runs_exit_is_told_once_every_process_it_left_is_gone(
    client: LauncherClient, tmp_path: Path
) -> None:
    """Its PID 1 tells the run's end before its namespaces are torn down (off the run's end), but
    only after it killed and reaped what the run left: when the exit arrives, nothing of it runs."""
    for name in ("fresh", "spare"):  # (the first run's PID 1 forked for it, the second's ahead)
        marker = "cloudlet-left-" + uuid.uuid4().hex[:8]
        command = f"(setsid bash -c 'exec -a {marker} sleep 300' &) ; sleep 0.2; echo left it"
        run = launch(client, run_dir(tmp_path, name), command)
        assert finish(run) == (0, "left it\n")
        assert not marked(marker), name
        if name == "fresh":
            wait_until(lambda: waiting_spare(client), 10, "the launcher's spare")
        else:
            assert run.spare


def test_a_sigterm_reaches_the_users_processes_and_not_the_reaper_first(
    client: LauncherClient, tmp_path: Path
) -> None:
    command = (
        "grep SigIgn /proc/self/status; trap 'echo caught; exit 7' TERM; echo ready; "
        "while true; do sleep 0.05; done"
    )
    run = launch(client, run_dir(tmp_path, "term"), command)
    assert run.stdout is not None
    # Nothing ignored comes from the launcher (SIGTERM) or Python (SIGPIPE, SIGXFSZ).
    seen = b""
    while not seen.endswith(b"ready\n"):
        seen += run.stdout.read(1)
    assert seen == b"SigIgn:\t0000000000000000\nready\n", seen
    run.send_signal(signal.SIGTERM)
    code, text = finish(run)
    assert code == 7 and "caught" in text, (code, text)  # the job's own handler decided its exit


def test_signals_the_agents_starter_ignored_are_not_ignored_in_a_run(box: Sandbox, tmp_path: Path) -> None:
    """A non-interactive shell's ``&`` ignores SIGINT and SIGQUIT, ``nohup`` SIGHUP; an exec keeps
    what is ignored, so the launcher (started by an agent started so) defaults them first."""
    inherited = (signal.SIGHUP, signal.SIGQUIT)
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in inherited}
    try:
        started = LauncherClient(box)
        started.start()  # the launcher inherits both ignored
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    try:
        code, text = finish(launch(started, run_dir(tmp_path, "ign"), "grep SigIgn /proc/self/status"))
    finally:
        started.close()
    assert (code, text) == (0, "SigIgn:\t0000000000000000\n")


def test_a_killed_launcher_loses_its_runs_and_the_next_run_gets_a_new_one(
    client: LauncherClient, tmp_path: Path
) -> None:
    marker = "cloudlet-lost-" + uuid.uuid4().hex[:8]
    run = launch(client, run_dir(tmp_path, "lost"), f"echo up; exec -a {marker} sleep 60")
    assert run.stdout is not None and run.stdout.read(3) == b"up\n"
    old = client.pid
    [process] = launcher_processes(old)
    os.kill(process, signal.SIGKILL)
    code, _ = finish(run)
    assert run.lost and code == 128 + signal.SIGKILL
    wait_until(lambda: not marked(marker), 10, "the lost run's processes to die with the launcher")
    # Started again by the next run, from that run's thread (as the agent's runs are); the new
    # launcher outlives the thread (a parent-death signal would follow the thread that started it).
    outcome: list[tuple[int, str]] = []
    thread = threading.Thread(
        target=lambda: outcome.append(finish(launch(client, run_dir(tmp_path, "next"), "echo next")))
    )
    thread.start()
    thread.join(30)
    assert outcome == [(0, "next\n")]
    restarted = client.pid
    assert restarted is not None and restarted != old
    assert finish(launch(client, run_dir(tmp_path, "after"), "echo after")) == (0, "after\n")
    assert client.pid == restarted


def launcher_processes(bwrap: int | None) -> list[int]:
    """The python launcher under the outer bwrap ``bwrap``."""
    assert bwrap is not None
    every = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    return [pid for pid in launcher_processes_among(every) if _descends(pid, bwrap)]


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def test_a_launcher_that_cannot_start_leaves_the_node_on_a_bwrap_per_run(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert node_launcher(Sandbox(Policy(mode="none"), hostname="n", state_dir=Path("/nonexistent"))) is None
    assert node_launcher(box, {"CLOUDLET_LAUNCHER": "off"}) is None
    # A capability the host refuses (here: one bwrap does not know) stops the launcher's start.
    monkeypatch.setattr(launcher, "CAPABILITIES", (*launcher.CAPABILITIES, "CAP_NOT_A_CAPABILITY"))
    monkeypatch.setattr(launcher_client, "READY_TIMEOUT_S", 10.0)
    client = node_launcher(box, {})  # started by the first run, not here
    assert client is not None and client.pid is None
    with pytest.raises(LauncherUnavailable):
        client.launch(["true"], cwd=box.home, env={}, binds=())  # the runner then starts a bwrap
    assert "each job run starts in a bwrap of its own" in capsys.readouterr().err
    with pytest.raises(LauncherUnavailable):  # refused once: not tried again for every run
        client.start()
    assert "each job run" not in capsys.readouterr().err
    client.close()


def children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(child) for child in f.read().split()}
    except OSError:
        return set()


def waiting_spare(client: LauncherClient, busy: tuple[int, ...] = ()) -> int | None:
    """The launcher's spare: its one child that is no run's PID 1 (``busy``), once there is one."""
    [serving] = launcher_processes(client.pid)
    spare = children(serving) - set(busy)
    return spare.pop() if len(spare) == 1 else None


def test_runs_start_in_spares_made_ahead_and_two_such_runs_cannot_see_or_signal_each_other(
    client: LauncherClient, tmp_path: Path
) -> None:
    """Each run's PID 1 is forked ahead (after the run before it spawned its command), with its
    namespaces and the node's fixed root made: what the run that takes it sees of the other is
    what a run forked for itself sees."""
    warm = launch(client, run_dir(tmp_path, "warm"), "echo warm")
    assert finish(warm) == (0, "warm\n") and not warm.spare  # the launcher's first run: none yet
    ahead = wait_until(lambda: waiting_spare(client), 10, "the launcher's spare")
    first, second = run_dir(tmp_path, "first"), run_dir(tmp_path, "second")
    suffix = uuid.uuid4().hex[:8]
    marker = "cloudlet-spare-" + suffix
    holder = launch(client, first, f"echo mine > mine.txt; echo ready; exec -a {marker} sleep 60")
    assert holder.spare and holder.pid == ahead
    assert holder.stdout is not None and holder.stdout.read(6) == b"ready\n"
    [victim] = marked(marker)
    # The next spare is made while the holder runs: it must hold nothing of the holder's.
    ahead = wait_until(lambda: waiting_spare(client, busy=(holder.pid,)), 10, "the next spare")
    probe = (
        f"cat {first}/mine.txt 2>&1; ls {first} 2>&1; echo work: $(ls {tmp_path / 'work'}); "
        f"M=cloudlet-spare; M=$M-{suffix}; for f in /proc/[0-9]*/cmdline; do "
        'read -r -d "" c < $f; case "$c" in *"$M"*) echo SEEN $f;; esac; done; '
        f"kill -TERM {victim} 2>&1 || echo kill refused; kill -KILL {holder.pid} 2>&1 || echo kill refused; "
        "echo pids: $(ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '); "
        "cat /proc/1/environ > /dev/null 2>&1 || echo reaper unreadable; "
        "sleep 30 & kill -9 -1; echo survived"
    )
    prober = launch(client, second, probe)
    assert prober.spare and prober.pid == ahead
    code, text = finish(prober)
    assert "mine" not in text.replace("mine.txt", "") and "SEEN" not in text, text
    assert text.count("No such file or directory") == 2, text
    assert f"work: {second.name}\n" in text, text  # (no scaffolding of the holder's in the spare)
    assert text.count("kill refused") == 2 and "reaper unreadable" in text, text
    pids = [int(p) for p in text.split("pids:")[1].split() if p.isdigit()]
    assert max(pids) < 50 and 1 in pids, text
    assert code in (0, 128 + signal.SIGKILL), (code, text)
    assert holder.poll() is None and marked(marker) == [victim]
    assert (first / "mine.txt").read_text() == "mine\n"
    holder.send_signal(signal.SIGTERM)
    assert finish(holder)[0] == 128 + signal.SIGTERM


def test_a_spare_built_for_another_root_is_not_used(
    box: Sandbox, client: LauncherClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose fixed part differs from the spare's (here: none) ends the spare and forks
    a PID 1 of its own: a spare's root is never one built for other steps."""
    assert finish(launch(client, run_dir(tmp_path, "warm"), "true"))[0] == 0
    ahead = wait_until(lambda: waiting_spare(client), 10, "the launcher's spare")
    gone = os.pidfd_open(ahead)
    plan_of = box.launch_plan

    def no_fixed_part(*args: object, **kwargs: object) -> object:
        plan = plan_of(*args, **kwargs)  # type: ignore[arg-type]
        plan.request["fixed"] = 0
        return plan

    monkeypatch.setattr(box, "launch_plan", no_fixed_part)
    run = launch(client, run_dir(tmp_path, "other"), "ls /usr > /dev/null && echo built")
    assert finish(run) == (0, "built\n") and not run.spare and run.pid != ahead
    assert select.select([gone], [], [], 10)[0], "the unused spare did not end"
    os.close(gone)


def test_a_killed_launcher_with_a_spare_loses_its_runs_and_its_spare_and_starts_again(
    client: LauncherClient, tmp_path: Path
) -> None:
    assert finish(launch(client, run_dir(tmp_path, "warm"), "true"))[0] == 0
    wait_until(lambda: waiting_spare(client), 10, "the launcher's spare")
    marker = "cloudlet-lost-" + uuid.uuid4().hex[:8]
    run = launch(client, run_dir(tmp_path, "lost"), f"echo up; exec -a {marker} sleep 60")
    assert run.spare and run.stdout is not None and run.stdout.read(3) == b"up\n"
    spare = wait_until(lambda: waiting_spare(client, busy=(run.pid,)), 10, "the next spare")
    spare_gone = os.pidfd_open(spare)
    old = client.pid
    [process] = launcher_processes(old)
    os.kill(process, signal.SIGKILL)
    code, _ = finish(run)
    assert run.lost and code == 128 + signal.SIGKILL
    assert select.select([spare_gone], [], [], 10)[0], "the spare outlived its launcher"
    os.close(spare_gone)
    wait_until(lambda: not marked(marker), 10, "the lost run's processes to die with the launcher")
    # The next run starts a new launcher (its PID 1 forked for it), and the one after, its spare.
    again = launch(client, run_dir(tmp_path, "next"), "echo next")
    assert finish(again) == (0, "next\n") and not again.spare
    restarted = client.pid
    assert restarted is not None and restarted != old
    wait_until(lambda: waiting_spare(client), 10, "the new launcher's spare")
    after = launch(client, run_dir(tmp_path, "after"), "echo after")
    assert finish(after) == (0, "after\n") and after.spare and client.pid == restarted


def niceness(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[16])
    except OSError:
        return None


PRIORITY = "nice; read -r s < /proc/1/stat; set -- ${s##*) }; echo ${17}"  # its own, its PID 1's


def test_a_spare_waits_at_the_lowest_priority_and_its_run_runs_at_the_launchers(
    client: LauncherClient, tmp_path: Path
) -> None:
    """A spare is made at the lowest priority (it never competes with a run's start or end) and
    raised before it takes a run: nothing of the run inherits it."""
    assert finish(launch(client, run_dir(tmp_path, "warm"), PRIORITY)) == (0, "0\n0\n")
    ahead = wait_until(lambda: waiting_spare(client), 10, "the launcher's spare")
    wait_until(lambda: niceness(ahead) == launcher.SPARE_NICE, 10, "the spare at the lowest priority")
    run = launch(client, run_dir(tmp_path, "raised"), PRIORITY)
    assert finish(run) == (0, "0\n0\n") and run.spare and run.pid == ahead


UNPRIVILEGED_AGENT = r"""
import sys
from pathlib import Path
from cloudlet.agent.launcher_client import node_launcher
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox

root = Path(sys.argv[1])
for root_inside in (False, True):
    box = Sandbox(Policy(mode="bwrap", root_inside=root_inside), hostname="n-u", state_dir=root / "state")
    launcher = node_launcher(box, {})
    assert launcher is not None, "the launcher did not start"
    cwd = root / f"run-{root_inside}"
    cwd.mkdir()
    command = "id -u; echo made > f; stat -c '%u %g' f; "
    command += "cat /proc/1/environ >/dev/null 2>&1 || echo -"
    run = launcher.launch(
        ["bash", "-c", command],
        cwd=cwd, env={"PATH": "/usr/bin:/bin"}, binds=[Bind(str(cwd), True)],
    )
    print(f"root_inside={root_inside}", run.stdout.read().decode().split(), run.wait(30), flush=True)
    launcher.close()
"""


def _unprivileged_agent() -> list[str]:
    """``setpriv`` as SANDBOX_UID and an interpreter whose folder that user can see (a venv under
    /root is not: the agent's code is the standard library's only, so the system's will do)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run an agent as another user")
    agent = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
    seen = "import os, sys; sys.exit(not os.path.isdir(os.path.dirname(os.path.realpath(sys.executable))))"
    usable = [
        p
        for p in (sys.executable, "/usr/bin/python3")
        if subprocess.run([*agent, p, "-c", seen]).returncode == 0
    ]
    if not usable:
        pytest.skip(f"no interpreter that uid {SANDBOX_UID} can see")
    return [*agent, usable[0]]


def _run_as_agent(agent: list[str], script: str, root: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run by the unprivileged ``agent`` with ``root`` (made its own) as its argument."""
    os.chown(root, SANDBOX_UID, SANDBOX_UID)
    return subprocess.run(
        [*agent, "-c", script, str(root)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.dirname(os.path.dirname(cloudlet.__file__))},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unprivileged_agents_launcher_runs_as_that_user_or_root_inside() -> None:
    """The agent not root: the launcher in a user namespace of its own, each run in one nested in
    it, as the agent's user (files are the agent's) or root inside (``CLOUDLET_SANDBOX_ROOT``)."""
    agent = _unprivileged_agent()
    root = Path(tempfile.mkdtemp(prefix="launcher-unprivileged-"))
    try:
        done = _run_as_agent(agent, UNPRIVILEGED_AGENT, root)
        lines = done.stdout.splitlines()
        assert done.returncode == 0 and len(lines) == 2, (done.stdout, done.stderr)
        # id -u, and the owner and group of the file it made, as the run sees them; its exit code
        # ("-": its PID 1, a copy of the launcher's memory, is not readable to it)
        assert lines[0] == f"root_inside=False {[str(SANDBOX_UID)] * 3 + ['-']} 0", lines
        assert lines[1] == "root_inside=True ['0', '0', '0', '-'] 0", lines
        assert os.stat(root / "run-True" / "f").st_uid == SANDBOX_UID  # root inside is the agent's user
    finally:
        shutil.rmtree(root, ignore_errors=True)


UNPRIVILEGED_SPARES = r"""
import sys
from pathlib import Path
from cloudlet.agent.launcher_client import node_launcher
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox

root = Path(sys.argv[1])
box = Sandbox(Policy(mode="bwrap"), hostname="n-u", state_dir=root / "state")
launcher = node_launcher(box, {})
assert launcher is not None, "the launcher did not start"
for n in range(3):
    cwd = root / f"run-{n}"
    cwd.mkdir()
    command = "id -u; nice; read -r s < /proc/1/stat; set -- ${s##*) }; echo ${17}"
    binds = [Bind(str(cwd), True)]
    run = launcher.launch(["bash", "-c", command], cwd=cwd, env={"PATH": "/usr/bin:/bin"}, binds=binds)
    # (the launcher makes the next spare when it tells a run's end, before it reads another request)
    print(run.spare, run.stdout.read().decode().split(), run.wait(30), flush=True)
launcher.close()
"""


def test_an_unprivileged_agents_launcher_that_cannot_raise_a_spare_makes_them_at_its_priority() -> None:
    """Under an unprivileged agent the launcher cannot raise a spare it made at the lowest
    priority (no CAP_SYS_NICE outside its user namespace): the first refusal ends that spare and
    its run gets a PID 1 of its own; later spares are made at the launcher's priority and used."""
    agent = _unprivileged_agent()
    root = Path(tempfile.mkdtemp(prefix="launcher-unprivileged-"))
    try:
        done = _run_as_agent(agent, UNPRIVILEGED_SPARES, root)
        lines = done.stdout.splitlines()
        ran = f"{[str(SANDBOX_UID), '0', '0']} 0"
        assert done.returncode == 0 and lines == [f"False {ran}", f"False {ran}", f"True {ran}"], (
            done.stdout,
            done.stderr,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- through the server ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "launcher")


def test_a_killed_launcher_ends_its_job_run_as_lost_and_the_node_runs_the_next(
    api: httpx.Client, srv: RunningServer
) -> None:
    cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 1, "max_instances": 1}
    create_compute(api, srv, "launch", {**cluster, "idle_time_before_scale_down": 120})
    wait_until(lambda: [n for n in nodes(api, srv, "launch") if n["state"] == "idle"], 60, "an idle node")
    name = "lost-" + uuid.uuid4().hex[:6]
    submit(
        api,
        srv,
        name,
        {"command": 'echo "attempt $CLOUDLET_ATTEMPT"; sleep 8; echo done', "compute": "azureml:launch"},
    )
    wait_until(lambda: "attempt 1\n" in log_text(api, srv, name), 40, "attempt 1 to start")
    [node_id] = job(api, srv, name)["attempts"][0]["nodes"]
    node_processes = processes_with_env("CLOUDLET_NODE_ID", node_id)
    [process] = launcher_processes_among(node_processes)
    os.kill(process, signal.SIGKILL)
    done = wait_job(api, srv, name, timeout=60)
    assert done["attempts"][0]["reasons"] == ["lost"], done["attempts"]
    assert "the node's launcher ended" in log_text(api, srv, name, attempt=1)
    assert "done" not in log_text(api, srv, name, attempt=1)
    # The same node ran the attempt after it, on a launcher started again.
    assert done["status"] == "Completed" and done["attempts"][1]["nodes"] == [node_id], done
    assert log_text(api, srv, name, attempt=2) == "attempt 2\ndone\n"
    assert launcher_processes_among(processes_with_env("CLOUDLET_NODE_ID", node_id)) != [process]


def launcher_processes_among(pids: list[int]) -> list[int]:
    """The launchers among ``pids``: its own forks (a run's holder and PID 1) share its command
    line, so only those whose parent is not one of them."""
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if launcher.__file__.encode() in argv and not argv[0].endswith(b"bwrap"):
            found.append(pid)
    return [pid for pid in found if _parent(pid) not in found]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[1])
    except OSError:
        return 0
