"""Building blocks of compute instances against the real thing: bash setup scripts, OpenSSH's sshd,
loop-mounted size-limited disks, and a Jupyter server's activity."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cloudlet.agent.activity import ActivityCollector
from cloudlet.agent.setup_scripts import ScriptSpec, log_path, run_script, run_setup_scripts
from cloudlet.agent.sshd import SshdError, sshd_binary, start_sshd, stop_sshd
from cloudlet.domain.compute.idleness import decide_idle, report_from_wire
from cloudlet.nodekit import disks

# --- setup scripts ----------------------------------------------------------------------------------


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    root.mkdir()
    return root


def test_creation_script_runs_once_per_os_disk_with_arguments(tmp_path: Path, share: Path) -> None:
    (share / "setup.sh").write_text('echo "creating with $1 $2"; echo made >> "$HOME_MARK"\n')
    os_disk, mark = tmp_path / "os", tmp_path / "count"
    spec = ScriptSpec(path="setup.sh", command="alpha 'b c'")
    env = {"HOME_MARK": str(mark)}
    first = run_script("creation", spec, os_disk, share, env=env)
    assert first.status == "ok" and first.exit_code == 0
    assert "creating with alpha b c" in first.tail
    assert log_path(os_disk, "creation") == os_disk / "logs" / "creation_script.log"
    again = run_script("creation", spec, os_disk, share, env=env)
    assert again.status == "skipped" and again.ok
    assert mark.read_text() == "made\n"


def test_startup_script_runs_every_start_and_log_accumulates(tmp_path: Path, share: Path) -> None:
    spec = ScriptSpec.from_doc({"command": "echo started; pwd", "timeout_minutes": 1})
    assert spec is not None
    for _ in range(2):
        result = run_setup_scripts(None, spec, tmp_path / "os", share)[0]
        assert result.status == "ok"
    log = (tmp_path / "os" / "logs" / "startup_script.log").read_text()
    assert log.count("started\n") == 2 and str(share) in log


def test_prefix_wraps_the_script(tmp_path: Path, share: Path) -> None:
    prefix = ["env", "WRAPPED=yes"]
    result = run_setup_scripts(
        None, ScriptSpec(command="echo $WRAPPED"), tmp_path / "os", share, prefix=prefix
    )
    assert result[0].status == "ok" and "yes\n" in result[0].tail


def test_failing_creation_script_reports_exit_code_and_skips_startup(tmp_path: Path, share: Path) -> None:
    creation = ScriptSpec(command="echo oops >&2; exit 3")
    results = run_setup_scripts(creation, ScriptSpec(command="echo never"), tmp_path / "os", share)
    assert len(results) == 1
    failed = results[0]
    assert (failed.status, failed.exit_code, failed.ok) == ("failed", 3, False)
    assert "oops" in failed.tail
    assert "failed with exit code 3" in failed.describe()
    assert not (tmp_path / "os" / ".cloudlet" / "creation_script.done").exists()


def test_timeout_kills_the_whole_process_group(tmp_path: Path, share: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The script starts a background child that would outlive a plain kill of bash.
    command = f"sleep 300 & echo $! > {pid_file}; echo waiting; wait"
    started = time.monotonic()
    result = run_script("startup", ScriptSpec(command=command), tmp_path / "os", share, timeout_s=1)
    assert result.status == "timed_out" and time.monotonic() - started < 10
    assert "waiting" in result.tail and "timed out after 1 s" in result.tail
    child = int(pid_file.read_text())
    # Killed, but the kernel may take a moment to finish it off and its new parent to reap it.
    assert _eventually(lambda: not _alive(child), timeout=5), "the script's child survived the timeout"


def test_missing_script_and_path_outside_the_share(tmp_path: Path, share: Path) -> None:
    missing = run_script("startup", ScriptSpec(path="nope.sh"), tmp_path / "os", share)
    assert missing.status == "missing" and "upload it to the share" in missing.tail
    outside = run_script("startup", ScriptSpec(path="../../etc/passwd"), tmp_path / "os", share)
    assert outside.status == "missing" and "outside the share" in outside.tail


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


# --- sshd ----------------------------------------------------------------------------------------------

needs_sshd = pytest.mark.skipif(
    sshd_binary() is None or shutil.which("ssh") is None,
    reason="!!! OpenSSH server/client not installed: run scripts/setup-tests.sh as root "
    "(apt-get install -y openssh-server) — SSH tests SKIPPED !!!",
)


def _keypair(directory: Path, name: str) -> tuple[Path, str]:
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key, (directory / f"{name}.pub").read_text()


def _ssh(key: Path, port: int, command: str = "echo ok") -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-p", str(port), "-i", str(key), "-o", "StrictHostKeyChecking=no"]
    argv += ["-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
    argv += ["-o", "GSSAPIAuthentication=no"]  # no Kerberos realm lookup over DNS
    argv += ["-o", "ConnectTimeout=5", "root@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@needs_sshd
def test_sshd_accepts_only_the_owners_key(tmp_path: Path) -> None:
    owner_key, owner_pub = _keypair(tmp_path, "owner")
    other_key, _ = _keypair(tmp_path, "other")
    state = tmp_path / "instance" / "ssh"
    handle = start_sshd(state, owner_pub)
    try:
        assert handle.started_in_s < 5
        print(f"sshd started in {handle.started_in_s:.3f} s on port {handle.port}")
        ok = _ssh(owner_key, handle.port)
        assert ok.returncode == 0 and ok.stdout.strip() == "ok", ok.stderr
        refused = _ssh(other_key, handle.port)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr
        config = handle.config_path.read_text()
        assert "PasswordAuthentication no" in config and "UsePAM no" in config
        assert (state / "authorized_keys").read_text() == owner_pub.strip() + "\n"
    finally:
        assert stop_sshd(state)
    assert not _alive(handle.pid)
    assert _ssh(owner_key, handle.port).returncode != 0


@needs_sshd
def test_sshd_keeps_its_host_key_across_restarts(tmp_path: Path) -> None:
    _, pub = _keypair(tmp_path, "owner")
    state = tmp_path / "ssh"
    first = start_sshd(state, pub)
    host_key = (state / "ssh_host_ed25519_key.pub").read_text()
    stop_sshd(state)
    second = start_sshd(state, pub)
    try:
        assert (state / "ssh_host_ed25519_key.pub").read_text() == host_key
        assert second.pid != first.pid
    finally:
        stop_sshd(state)


@needs_sshd
def test_sshd_refuses_a_bad_key(tmp_path: Path) -> None:
    with pytest.raises(SshdError, match="one OpenSSH public key line"):
        start_sshd(tmp_path / "ssh", "not a key")


@needs_sshd
def test_ssh_session_counts_as_activity(tmp_path: Path) -> None:
    key, pub = _keypair(tmp_path, "owner")
    state = tmp_path / "ssh"
    handle = start_sshd(state, pub)
    argv = ["ssh", "-p", str(handle.port), "-i", str(key), "-o", "StrictHostKeyChecking=no"]
    argv += ["-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "GSSAPIAuthentication=no"]
    argv += ["root@127.0.0.1", "sleep 30"]
    session = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        collector = ActivityCollector(None, ssh_port=handle.port)
        seen = _eventually(lambda: collector.collect()["ssh"]["sessions"] == 1)
        assert seen, "the open SSH session was not counted"
        decision = decide_idle(report_from_wire(collector.collect()), 1, datetime.now(UTC))
        assert decision.reasons == ("1 SSH session",)
    finally:
        session.kill()
        session.wait()
        stop_sshd(state)


# --- size-limited disks ----------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a disk needs root")


@pytest.fixture
def disk_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "osdisk"
    yield path
    if disks.is_mounted(path):
        disks.release(path)


def _fill(path: Path, chunk: bytes = b"\0" * (1 << 20)) -> int:
    written = 0
    with open(path, "wb") as handle:
        while True:
            try:
                handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written
            written += len(chunk)
            assert written < 1 << 30, "no limit: wrote 1 GiB"


@needs_root
def test_loop_ext4_disk_refuses_writes_past_its_size(disk_path: Path) -> None:
    info = disks.prepare(disk_path, 0, size_bytes=32 << 20, methods=["loop-ext4"])
    print(f"loop-ext4 disk prepared in {info.prepared_in_s:.3f} s")
    assert info.method == "loop-ext4" and info.enforced and disks.is_mounted(disk_path)
    written = _fill(disk_path / "big")
    assert 16 << 20 < written <= 32 << 20
    assert disks.is_full(disk_path)
    assert "OS disk full" in disks.full_reason(disk_path)
    (disk_path / "big").unlink()
    assert not disks.is_full(disk_path)
    (disk_path / "after").write_bytes(b"x" * (4 << 20))  # writable again
    disks.detach(disk_path)  # instance stop: unmounted, files kept in the image
    assert not disks.is_mounted(disk_path) and not (disk_path / "after").exists()
    again = disks.prepare(disk_path, 0, size_bytes=32 << 20)
    assert again.method == "loop-ext4" and (disk_path / "after").stat().st_size == 4 << 20
    disks.release(disk_path)
    assert not disk_path.exists() and not disks.image_path(disk_path).exists()
    assert not disks.is_mounted(disk_path)


@needs_root
def test_tmpfs_disk_refuses_writes_past_its_size(disk_path: Path) -> None:
    info = disks.prepare(disk_path, 0, size_bytes=16 << 20, methods=["tmpfs"])
    assert info.method == "tmpfs" and info.enforced
    assert _fill(disk_path / "big") <= 16 << 20
    assert disks.is_full(disk_path)
    disks.release(disk_path)
    assert not disk_path.exists()


def test_existing_plain_folder_is_not_hidden_by_a_mount(disk_path: Path) -> None:
    disk_path.mkdir()
    (disk_path / "notebook.ipynb").write_text("{}")
    info = disks.prepare(disk_path, 0, size_bytes=32 << 20)
    assert info.method == "accounting" and (disk_path / "notebook.ipynb").exists()
    disks.release(disk_path)


def test_accounting_disk_reports_full(disk_path: Path) -> None:
    info = disks.prepare(disk_path, 0, size_bytes=1 << 20, methods=["accounting"])
    assert info.method == "accounting" and not info.enforced and "root is not stopped" in info.note
    (disk_path / "f").write_bytes(os.urandom(2 << 20))
    used, total = disks.usage(disk_path)
    assert used >= 2 << 20 and total == 1 << 20
    assert disks.is_full(disk_path)
    disks.mark_full(disk_path, True)
    disks.release(disk_path)
    assert not disk_path.exists()


# --- Jupyter activity ------------------------------------------------------------------------------------

try:
    import jupyter_server  # noqa: F401

    HAVE_JUPYTER = True
except ImportError:
    HAVE_JUPYTER = False

needs_jupyter = pytest.mark.skipif(
    not HAVE_JUPYTER,
    reason="!!! jupyter_server missing (.venv/bin/uv pip install jupyterlab): Jupyter tests SKIPPED !!!",
)


def _free_port() -> int:
    for port in range(24000 + os.getpid() % 4000, 32000):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@pytest.fixture
def jupyter(tmp_path: Path) -> Iterator[tuple[str, str]]:
    token, port = uuid.uuid4().hex, _free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
    argv += ["--allow-root"] if os.geteuid() == 0 else []
    argv += [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--port-retries=0"]
    log = (tmp_path / "jupyter.log").open("wb")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "HOME": str(tmp_path)}
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        ready = _eventually(lambda: _api(base, token, "GET", "/api/status") is not None, timeout=60)
        assert ready, (tmp_path / "jupyter.log").read_text()[-2000:]
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _api(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"token {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"null")
    except OSError:
        return None


def _execute(base: str, token: str, kernel_id: str, code: str) -> None:
    """Send one execute_request over the kernel WebSocket and wait until the kernel has taken it
    (its first message about the request: "busy"), not for its end."""
    from websockets.sync.client import connect

    url = base.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
    header = {"msg_id": uuid.uuid4().hex, "username": "t", "session": uuid.uuid4().hex}
    header |= {"msg_type": "execute_request", "version": "5.3", "date": datetime.now(UTC).isoformat()}
    message = {"header": header, "parent_header": {}, "metadata": {}, "channel": "shell"}
    message["content"] = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
    deadline = time.monotonic() + 60
    with connect(url, additional_headers={"Authorization": f"token {token}"}) as ws:
        ws.send(json.dumps(message))
        while True:  # closed before the kernel has it, the request may be dropped on the way
            answer = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if answer.get("parent_header", {}).get("msg_id") == header["msg_id"]:
                return


def _eventually(check: Any, timeout: float = 20, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return False


@needs_jupyter
def test_jupyter_busy_kernel_then_idle(jupyter: tuple[str, str], tmp_path: Path) -> None:
    base, token = jupyter
    session = _api(
        base, token, "POST", "/api/sessions", {"path": "analysis.ipynb", "type": "notebook", "kernel": {}}
    )
    assert session is not None, "could not start a kernel"
    kernel_id = session["kernel"]["id"]
    terminal = _api(base, token, "POST", "/api/terminals")
    collector = ActivityCollector(base, token)
    # Jupyter says "starting" until a client talks to the kernel, as JupyterLab does on opening.
    _execute(base, token, kernel_id, "pass")
    assert _eventually(lambda: _states(collector) == ["idle"], timeout=60), collector.collect()

    # Busy until the test has looked (a fixed sleep's busy spell could end before a loaded
    # machine's look, and the test with it).
    release = tmp_path / "release"
    _execute(
        base,
        token,
        kernel_id,
        f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists():\n    time.sleep(0.05)",
    )
    assert _eventually(lambda: _states(collector) == ["busy"], timeout=60), collector.collect()
    wire = collector.collect()
    assert wire["kernels"][0]["notebook"] == "analysis.ipynb"
    if terminal is not None:
        assert wire["terminals"] and wire["terminals"][0]["name"] == terminal["name"]
    busy = decide_idle(report_from_wire(wire), 1, datetime.now(UTC))
    assert not busy.idle and busy.explanation == "not idle: kernel busy in analysis.ipynb"

    release.touch()
    assert _eventually(lambda: _states(collector) == ["idle"], timeout=60), collector.collect()
    idle = decide_idle(report_from_wire(collector.collect()), None, datetime.now(UTC), timeout_s=60)
    assert idle.idle and not idle.should_stop and idle.stops_at is not None
    assert idle.explanation.startswith("idle ") and "of 60 s; stops at" in idle.explanation


def _states(collector: ActivityCollector) -> list[str]:
    return [k["execution_state"] for k in collector.collect()["kernels"]]
