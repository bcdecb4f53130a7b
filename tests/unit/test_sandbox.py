"""The sandbox's pure parts: its policy from the environment, the argv it builds, the identity
files, and the symlink-refusing walks of ``safe_paths`` (on a real temporary folder)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cloudlet.nodekit import safe_paths
from cloudlet.nodekit.sandbox import (
    Bind,
    Policy,
    Sandbox,
    SandboxError,
    identity_files,
    interpreter_paths,
    user_environment,
)

ROOT = Policy(mode="bwrap", privileged=True)


def sandbox(tmp_path: Path, policy: Policy = ROOT) -> Sandbox:
    return Sandbox(policy, hostname="n-test", state_dir=tmp_path / "state", home="/home/h")


def pairs(argv: list[str], option: str) -> list[str]:
    """The argument after each occurrence of ``option``."""
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


def test_policy_from_env() -> None:
    assert Policy.from_env({}).mode == "none" and not Policy.from_env({}).enabled
    policy = Policy.from_env(
        {"CLOUDLET_SANDBOX": "bwrap", "CLOUDLET_SANDBOX_UID": "1234", "CLOUDLET_SANDBOX_ROOT": "1"}
    )
    assert (policy.mode, policy.uid, policy.gid, policy.root_inside) == ("bwrap", 1234, 65534, True)
    with pytest.raises(SandboxError, match="bwrap, none"):
        Policy.from_env({"CLOUDLET_SANDBOX": "docker"})
    with pytest.raises(SandboxError, match="a number"):
        Policy.from_env({"CLOUDLET_SANDBOX": "bwrap", "CLOUDLET_SANDBOX_GID": "staff"})
    if os.geteuid() == 0:
        with pytest.raises(SandboxError, match="unprivileged"):
            Policy.from_env({"CLOUDLET_SANDBOX": "bwrap", "CLOUDLET_SANDBOX_UID": "0"})


def test_off_leaves_the_command_alone(tmp_path: Path) -> None:
    off = sandbox(tmp_path, Policy(mode="none"))
    assert off.wrap(["bash", "-c", "true"], cwd="/x", binds=[Bind("/data", True)]) == ["bash", "-c", "true"]
    assert not (tmp_path / "state").exists()


def test_root_agent_binds_then_drops_to_the_sandbox_user(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    argv = box.wrap(["bash", "-c", "echo hi"], cwd="/srv/work/r1", binds=[Bind("/srv/work/r1", True)])
    assert os.path.basename(argv[0]) == "bwrap"
    assert "--unshare-user" not in argv  # as real root that would map uid 0 to host root
    for flag in (
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
    ):
        assert flag in argv
    assert "--new-session" not in argv  # the agent signals the run's process group
    assert pairs(argv, "--hostname") == ["n-test"]
    assert "/usr" in pairs(argv, "--ro-bind") and "/etc" in pairs(argv, "--ro-bind")
    assert pairs(argv, "--proc") == ["/proc"] and pairs(argv, "--dev") == ["/dev"]
    assert "/tmp" in pairs(argv, "--tmpfs") and "/dev/shm" in pairs(argv, "--tmpfs")
    assert pairs(argv, "--bind") == ["/srv/work/r1"] and pairs(argv, "--chdir") == ["/srv/work/r1"]
    # Missing parents are made 0755 before the bind (bwrap would make them 0700 and root's).
    assert argv.index("/srv") < argv.index("/srv/work") < argv.index("--bind")
    assert pairs(argv, "--perms").count("0755") >= 2
    inner = argv[argv.index("--") + 1 :]
    assert os.path.basename(inner[0]) == "setpriv"
    assert inner[1:6] == ["--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs", "bash"]
    assert inner[-3:] == ["bash", "-c", "echo hi"]


def test_root_inside_is_a_user_namespace_after_the_drop(tmp_path: Path) -> None:
    box = sandbox(tmp_path, Policy(mode="bwrap", root_inside=True, privileged=True))
    inner = box.wrap(["id"], cwd="/").copy()
    inner = inner[inner.index("--") + 1 :]
    names = [os.path.basename(a) for a in inner]
    assert names.index("setpriv") < names.index("unshare")
    assert inner[names.index("unshare") + 1 :] == ["--user", "--map-root-user", "id"]
    assert box.uid_inside() == 0 and box.user_name() == "root"
    assert box.uid_inside(root_inside=False) == 65534 and box.user_name(root_inside=False) == "azureuser"
    plain = box.wrap(["id"], cwd="/", root_inside=False)
    assert "unshare" not in [os.path.basename(a) for a in plain]


def test_unprivileged_agent_uses_a_user_namespace_as_itself(tmp_path: Path) -> None:
    box = sandbox(tmp_path, Policy(mode="bwrap", privileged=False))
    argv = box.wrap(["id"], cwd="/")
    assert "--unshare-user" in argv and "--uid" not in argv
    assert argv[argv.index("--") + 1 :] == ["id"]  # no uid change: it is not root
    rooted = sandbox(tmp_path, Policy(mode="bwrap", privileged=False, root_inside=True)).wrap(["id"], cwd="/")
    assert pairs(rooted, "--uid") == ["0"] and pairs(rooted, "--gid") == ["0"]
    assert box.owner == (os.getuid(), os.getgid())


def test_binds_sort_parents_first_and_descriptors_are_bound_as_such(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    binds = [Bind("/data/ds/out", True, fd=7), Bind("/data/ds", False), Bind("/data/ds/in.csv", False, fd=8)]
    argv = box.wrap(["true"], cwd="/", binds=binds)
    assert pairs(argv, "--ro-bind-fd") == ["8"] and pairs(argv, "--bind-fd") == ["7"]
    ro = argv.index("/data/ds", argv.index("--ro-bind", argv.index("--die-with-parent")))
    assert ro < argv.index("/data/ds/out")  # the parent's bind first, the child's on top
    # Nothing is made inside a bound folder: its insides are the host's.
    assert "/data/ds" not in pairs(argv, "--dir")


def test_interpreter_is_visible_read_only(tmp_path: Path) -> None:
    argv = sandbox(tmp_path).wrap(["python", "-V"], cwd="/")
    visible = [*pairs(argv, "--ro-bind"), "/usr", "/opt"]
    for path in interpreter_paths():
        assert any(path == v or path.startswith(v + "/") for v in visible), path


def test_identity_files_name_the_sandbox_user(tmp_path: Path) -> None:
    files = identity_files(65534, 65534, "/home/h", "n-1", "127.0.0.1\tlocalhost\n")
    assert "azureuser:x:65534:65534:cloudlet user:/home/h:/bin/bash" in files["passwd"].splitlines()
    assert files["passwd"].startswith("root:x:0:0:")
    assert "azureuser:x:65534:" in files["group"].splitlines()
    assert files["hosts"].splitlines() == ["127.0.0.1\tlocalhost", "127.0.0.1\tn-1"]
    other = identity_files(2000, 2000, "/h", "n-2")
    assert "nobody:x:65534:65534:" in other["passwd"] and "nogroup:x:65534:" in other["group"]
    box = sandbox(tmp_path)
    argv = box.wrap(["true"], cwd="/")
    bound = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--ro-bind"}
    assert bound[str(tmp_path / "state" / "passwd")] == "/etc/passwd"
    assert (tmp_path / "state" / "passwd").read_text().count("azureuser") == 1


def test_a_second_sandbox_of_a_folder_leaves_its_identity_files_in_place(tmp_path: Path) -> None:
    """A deployment's replicas each make a sandbox of one folder, one right after another: the
    second must not replace the files the first one's bwrap may still be binding (under load, it
    failed with "/newroot/etc/group (deleted)" and the roll-out with it)."""
    sandbox(tmp_path)
    files = ("passwd", "group", "hosts")
    first = {name: (tmp_path / "state" / name).stat().st_ino for name in files}
    sandbox(tmp_path)
    assert {name: (tmp_path / "state" / name).stat().st_ino for name in files} == first
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == sorted(files)  # no temporaries


def test_user_environment_is_an_allowlist() -> None:
    agent = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "PIP_INDEX_URL": "http://mirror",
        "CLOUDLET_NODE_ID": "n-1",
        "CLOUDLET_INSTALLATION": "i-1",
        "CLOUDLET_NODE_TOKEN": "secret",
        "CLOUDLET_APP_TOKEN": "secret",
        "CLOUDLET_NODE_DIR": "/root/.cloudlet/nodes/n-1",
        "CLOUDLET_SERVER": "http://127.0.0.1:8571",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "server's",
    }
    assert user_environment(agent) == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "PIP_INDEX_URL": "http://mirror",
        "CLOUDLET_NODE_ID": "n-1",
        "CLOUDLET_INSTALLATION": "i-1",
    }


# -- safe_paths -----------------------------------------------------------------------------------
def test_open_path_refuses_a_users_symlink_and_follows_roots(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    owner = os.lstat(tmp_path / "link").st_uid
    fd = safe_paths.open_path(str(tmp_path / "link" / "made" / "deeper"), create=True, directory=True)
    os.close(fd)
    assert (tmp_path / "real" / "made" / "deeper").is_dir()  # our own link: trusted when we are root
    if owner == 0:
        os.lchown(tmp_path / "link", 65534, 65534)  # now a user's link: refused
        with pytest.raises(safe_paths.UnsafePath, match="uid 65534"):
            safe_paths.open_path(str(tmp_path / "link" / "made"))
        with pytest.raises(safe_paths.UnsafePath):
            safe_paths.chown_tree(str(tmp_path / "link"), 65534, 65534)
    with pytest.raises(FileNotFoundError):
        safe_paths.open_path(str(tmp_path / "missing"))


def test_open_file_never_follows_the_last_component(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    (tmp_path / "log").symlink_to(secret)
    with pytest.raises(safe_paths.UnsafePath):
        safe_paths.write_bytes(str(tmp_path / "log"), b"user-controlled", append=True)
    with pytest.raises(safe_paths.UnsafePath):
        safe_paths.read_bytes(str(tmp_path / "log"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(safe_paths.UnsafePath, match="regular"):
        safe_paths.read_bytes(str(tmp_path / "fifo"))
    assert secret.read_text() == "s3cret"
    safe_paths.write_bytes(str(tmp_path / "plain"), b"0123456789")
    assert safe_paths.read_bytes(str(tmp_path / "plain"), 3, from_end=True) == b"789"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_chown_tree_changes_links_not_their_targets(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.write_text("root's")
    (tree / "sub" / "escape").symlink_to(outside)
    safe_paths.chown_tree(str(tree), 65534, 65534, recursive=True)
    for path in (tree, tree / "sub", tree / "sub" / "f", tree / "sub" / "escape"):
        assert os.lstat(path).st_uid == 65534, path
    assert os.stat(outside).st_uid == 0
    assert (
        safe_paths.owner_of(str(tree)) == (65534, 65534) and safe_paths.owner_of(str(tmp_path / "no")) is None
    )


def test_a_venv_on_an_interpreter_the_sandbox_cannot_see_brings_it_in(tmp_path: Path) -> None:
    """An environment built on a CLOUDLET_PYTHONS interpreter (e.g. pyenv's 3.8 under a home
    folder) links its python there: the sandbox must bind that prefix or the link dangles."""
    box = sandbox(tmp_path)
    prefix = tmp_path / "pythons" / "3.8.18"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3.8").write_text("")
    venv = tmp_path / "envs" / "e1"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(prefix / "bin" / "python3.8")
    assert box.venv_binds(venv) == [Bind(str(venv)), Bind(str(prefix))]
    visible = Path(box.visible[0])
    inside = tmp_path / "envs" / "e2"
    (inside / "bin").mkdir(parents=True)
    (inside / "bin" / "python").symlink_to(visible / "python3")  # under a folder every sandbox sees
    assert box.venv_binds(inside) == [Bind(str(inside))]


def test_the_launchers_plan_is_the_same_root_with_every_bind_a_descriptor(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    run = tmp_path / "nodes" / "n1" / "work" / "r1"
    data = tmp_path / "data"
    run.mkdir(parents=True)
    data.mkdir()
    given = os.open(data, os.O_PATH)
    try:
        plan = box.launch_plan(
            ["bash", "-c", "true"],
            cwd=run,
            env={"PATH": "/usr/bin"},
            binds=[Bind(str(run), True), Bind(str(data), False, given)],
        )
    finally:
        os.close(given)
    ops = plan.request["ops"]
    # The fixed part as bwrap's: system folders read-only, /dev, /proc, a private /tmp.
    assert ["bind", "/usr", False] in ops and ["proc"] in ops and ["tmpfs", "/tmp", "1777"] in ops
    assert len([op for op in ops if op[0] == "dev"]) == 1
    binds = [op for op in ops if op[0] == "fdbind"]
    # Parents first; each bind names its descriptor, where it goes, and the host path it reads.
    assert binds == [
        ["fdbind", 0, str(data), str(data), False],
        ["fdbind", 1, str(run), str(run), True],
    ]
    assert plan.fds[0] == given and len(plan.fds) == 2
    assert plan.owned == [plan.fds[1]]  # the path bind was opened for the plan: the caller closes it
    os.close(plan.owned[0])
    scaffolding = [op[1] for op in ops if op[0] == "dir"]
    assert str(run.parent) in scaffolding and str(tmp_path / "nodes") in scaffolding
    assert scaffolding.index(str(tmp_path / "nodes")) < scaffolding.index(str(run.parent))
    assert plan.request["uid"] == 65534 and plan.request["privileged"] is True
    assert plan.request["root_inside"] is False and plan.request["cwd"] == str(run)


def test_the_launcher_keeps_the_capabilities_to_make_namespaces(tmp_path: Path) -> None:
    from cloudlet.nodekit import launcher

    argv = sandbox(tmp_path).launcher_argv(7)
    assert os.path.basename(argv[0]) == "bwrap" and "--unshare-user" not in argv
    assert {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID"} <= set(pairs(argv, "--cap-add"))
    assert argv[argv.index("--bind", argv.index("--die-with-parent")) + 2] == launcher.HOST_VIEW
    assert argv[-5:] == [sys.executable, "-I", "-S", launcher.__file__, "7"]
    unprivileged = sandbox(tmp_path, Policy(mode="bwrap", privileged=False)).launcher_argv(7)
    assert unprivileged[unprivileged.index("--unshare-user") :][:5] == [
        *("--unshare-user", "--uid", "0", "--gid", "0")
    ]
    with pytest.raises(SandboxError):
        sandbox(tmp_path, Policy(mode="none")).launcher_argv(7)
