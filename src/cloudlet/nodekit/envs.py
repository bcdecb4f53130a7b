"""Job environments on a node (stdlib only): the node's Python, a venv cached by hash, or an image.

A ``venv`` environment is built once per host into ``<cache root>/<hash>`` with uv (or, without
uv, ``python -m venv`` and pip), under an exclusive ``flock`` on ``<cache root>/<hash>.lock`` so
that nodes sharing the cache never build the same environment twice at once. The venv is built
where it will live (venvs are not relocatable: console scripts carry their interpreter's absolute
path) and becomes usable only when its marker file is written, last and atomically; a failed or
canceled build is removed. ``image`` environments do not run in containers yet: the run gets a
warning in its log and the node's Python (plus a venv when the environment also lists packages).
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily at run time, like this module
    from cloudlet.nodekit.sandbox import Bind, Sandbox

MARKER = ".cloudlet-env.json"
KILL_AFTER_S = 1.0
LEFTOVER_GRACE_S = 2.0
RUNTIME_CHECK_S = 5.0
HASH_PATTERN = re.compile(r"[0-9a-f]{16,128}")

Log = Callable[[str], None]


class BuildFailed(RuntimeError):
    """The environment could not be prepared; the message says why, for the run's log."""


class Canceled(BuildFailed):
    """The run was stopped while its environment was being prepared."""


def cache_root(node_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """``CLOUDLET_ENV_CACHE`` (a host-wide folder set by the provider), else the node's OS disk."""
    env = os.environ if env is None else env
    configured = env.get("CLOUDLET_ENV_CACHE", "").strip()
    return Path(configured) if configured else node_dir / "os" / "envs"


def build_cache(cache_root: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where sandboxed builds keep uv's and pip's download caches: ``CLOUDLET_BUILD_CACHE``, else
    a folder beside the environment cache (not in it: only environments live there)."""
    env = os.environ if env is None else env
    configured = env.get("CLOUDLET_BUILD_CACHE", "").strip()
    return Path(configured) if configured else cache_root.parent / f"{cache_root.name}-build-cache"


def find_uv(env: Mapping[str, str] | None = None) -> str | None:
    """``CLOUDLET_UV`` (the agent's setting: a run's environment does not carry it), else ``uv``
    next to this interpreter, else ``uv`` on PATH."""
    env = os.environ if env is None else env
    configured = (env.get("CLOUDLET_UV") or os.environ.get("CLOUDLET_UV") or "").strip()
    if configured:
        return configured
    beside = Path(sys.executable).parent / "uv"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv", path=env.get("PATH"))


def container_runtime(env: Mapping[str, str] | None = None) -> str | None:
    """``podman`` or ``docker`` when one is on PATH and answers ``info``."""
    env = os.environ if env is None else env
    for name in ("podman", "docker"):
        path = shutil.which(name, path=env.get("PATH"))
        if not path:
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [path, "info"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=RUNTIME_CHECK_S,
                check=False,
            )
            if done.returncode == 0:
                return name
    return None


def prepare(
    env_spec: Mapping[str, Any] | None,
    cache_root: Path,
    log: Log,
    *,
    stop: threading.Event | None = None,
    base_env: Mapping[str, str] | None = None,
    sandbox: Sandbox | None = None,
    image_venv: bool = False,
) -> dict[str, str]:
    """Make the run's environment ready; return the variables to add to the run's environment.

    ``log`` receives text for the run's log. ``stop`` set during a build kills the build and
    raises ``Canceled``; a build that fails raises ``BuildFailed``. ``base_env`` is the run's
    environment so far (its PATH is extended; the build tools run with it). ``sandbox``: the build
    (which runs the chosen packages' own code) runs in it, as its user, seeing only its target
    and the download cache writable. ``image_venv``: an image with no packages gets a venv with
    only pip (a job's, which may ``pip install``); else it uses the node's Python (a replica's:
    the node's inference interpreter).
    """
    spec = dict(env_spec or {})
    base = dict(os.environ if base_env is None else base_env)
    kind = str(spec.get("kind") or "python")
    pip = [str(p) for p in spec.get("pip") or []]
    if kind == "python":
        return {}
    if kind == "image":
        image = spec.get("image") or "(unnamed)"
        runtime = container_runtime(base)
        if runtime:
            why = f"cloudlet does not run jobs in containers yet (found {runtime})"
        else:
            why = "this node runs jobs without a container runtime"
        if not pip and not image_venv:
            log(f"cloudlet-agent: warning: image {image} requested; {why}: using the node's Python\n")
            return {}
        what = "its pip packages" if pip else "pip"  # an image has pip: so has its stand-in
        log(f"cloudlet-agent: warning: image {image} requested; {why}: using a venv with {what}\n")
    elif kind != "venv":
        raise BuildFailed(f"unknown environment kind {kind!r} (expected python, venv or image)")
    digest = str(spec.get("hash") or "")
    if not HASH_PATTERN.fullmatch(digest):
        canonical = json.dumps({"image": spec.get("image"), "kind": kind, "pip": sorted(pip)})
        digest = hashlib.sha256(canonical.encode()).hexdigest()
    conda = spec.get("conda") if isinstance(spec.get("conda"), dict) else None
    tool = find_conda(base) if conda else None
    # conda/micromamba install the conda file as written, its python= pin included
    interpreter = sys.executable if tool else choose_python(str(spec.get("python") or "") or None, base, log)
    venv = ensure_venv(
        digest,
        pip,
        Path(cache_root),
        log,
        stop=stop,
        base_env=base,
        name=spec.get("name"),
        sandbox=sandbox,
        python=interpreter,
        conda=(tool, conda) if tool and conda else None,
    )
    path = base.get("PATH") or os.defpath
    return {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{path}"}


def python_version(path: str) -> str | None:
    """``"3.10"`` for the interpreter at PATH (None: it does not run)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [path, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUNTIME_CHECK_S,
            check=False,
        )
        if done.returncode == 0 and re.fullmatch(r"\d+\.\d+", done.stdout.strip()):
            return done.stdout.strip()
    return None


def find_python(version: str, env: Mapping[str, str] | None = None) -> str | None:
    """An interpreter of VERSION ("3.10") on this node: one listed in ``CLOUDLET_PYTHONS`` (the
    interpreters a location lists, separated by ``:``), else ``python3.10`` on PATH."""
    env = os.environ if env is None else env
    listed = (env.get("CLOUDLET_PYTHONS") or os.environ.get("CLOUDLET_PYTHONS") or "").split(os.pathsep)
    for path in filter(None, (p.strip() for p in listed)):
        if os.access(path, os.X_OK) and python_version(path) == version:
            return path
    found = shutil.which(f"python{version}", path=env.get("PATH"))
    return found if found and python_version(found) == version else None


def choose_python(pinned: str | None, env: Mapping[str, str], log: Log) -> str:
    """The interpreter to build on: the pinned version's when the node has it, else this one's
    (said in the run's log; the server said so too, at submission)."""
    own = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not pinned or pinned == own:
        return sys.executable
    found = find_python(pinned, env)
    if found:
        return found
    log(
        f"cloudlet-agent: warning: the environment pins Python {pinned}; this node has none "
        f"(python{pinned} on PATH or in CLOUDLET_PYTHONS): building on Python {own} instead\n"
    )
    return sys.executable


def _python_tag(python: str = sys.executable) -> str:
    if python == sys.executable:
        return f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
    return f"cpython-{python_version(python) or '?'}"


def _ready(target: Path) -> bool:
    """A complete venv (its marker is written last) whose interpreter is still there."""
    try:
        json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (target / "bin" / "python").exists()


def ensure_venv(
    digest: str,
    pip: Sequence[str],
    cache_root: Path,
    log: Log,
    *,
    stop: threading.Event | None = None,
    base_env: Mapping[str, str] | None = None,
    name: str | None = None,
    sandbox: Sandbox | None = None,
    python: str = sys.executable,
    conda: tuple[str, dict[str, Any]] | None = None,
) -> Path:
    """``cache_root/<digest>``, built now (on PYTHON; with CONDA's tool and file when given)
    unless a complete one is already there."""
    target, short = cache_root / digest, digest[:12]
    if _ready(target):
        log(f"cloudlet-agent: environment {short} reused ({target})\n")
        return target
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        lock = open(cache_root / f"{digest}.lock", "a+b")  # noqa: SIM115 (held across the build)
    except OSError as exc:
        raise BuildFailed(f"cannot use the environment cache {cache_root}: {exc}") from exc
    with lock:
        _lock(lock.fileno(), stop, log, short)
        if _ready(target):  # another node built it while we waited
            log(f"cloudlet-agent: environment {short} reused ({target})\n")
            return target
        if target.exists():
            log(f"cloudlet-agent: removing an incomplete build of environment {short}\n")
            shutil.rmtree(target, ignore_errors=True)
        _build(target, list(pip), log, stop, dict(base_env or os.environ), name, sandbox, python, conda)
    return target


def _lock(fd: int, stop: threading.Event | None, log: Log, short: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        log(f"cloudlet-agent: waiting for another build of environment {short} on this host\n")
    while True:
        if stop is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        if stop.wait(0.2):
            raise Canceled("canceled while waiting for the environment")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


def _build(
    target: Path,
    pip: list[str],
    log: Log,
    stop: threading.Event | None,
    env: dict[str, str],
    name: str | None,
    sandbox: Sandbox | None = None,
    interpreter: str = sys.executable,
    conda: tuple[str, dict[str, Any]] | None = None,
) -> None:
    short = target.name[:12]
    uv = find_uv(env)
    tool = f"uv ({uv})" if uv else "python -m venv and pip (uv not found)"
    tool = f"{os.path.basename(conda[0])} ({conda[0]}) from the conda file" if conda else tool
    what = ", ".join(pip) if pip else "no packages"
    label = f" '{name}'" if name else ""
    log(f"cloudlet-agent: Preparing environment{label} {short} ({what}) with {tool}\n")
    env = {k: v for k, v in env.items() if k not in ("CLOUDLET_NODE_TOKEN", "VIRTUAL_ENV", "PYTHONHOME")}
    env["NO_COLOR"] = "1"
    python = str(target / "bin" / "python")
    began = time.monotonic()
    try:
        binds = _sandboxed(target, uv, env, sandbox, interpreter)
        run = functools.partial(_run, log=log, stop=stop, env=env, sandbox=sandbox, binds=binds)
        if conda:
            _conda_create(target, conda, run, env)
        # --seed: pip in every environment (a job's `pip install …` works, as in Azure's images)
        elif uv:
            run("uv venv", [uv, "venv", "--no-project", "--seed", "--python", interpreter, str(target)])
            if pip:
                run("uv pip install", [uv, "pip", "install", "--python", python, *pip])
        else:
            run("python -m venv", [interpreter, "-m", "venv", str(target)])
            if pip:
                run(
                    "pip install",
                    [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *pip],
                )
        marker = {
            "python": _python_tag(interpreter),
            "pip": pip,
            "name": name,
            "built_at": time.time(),
            "tool": tool,
        }
        tmp = target / f"{MARKER}.tmp"
        _write_marker(tmp, json.dumps(marker))
        tmp.replace(target / MARKER)
    except BaseException as exc:
        shutil.rmtree(target, ignore_errors=True)  # no half-built environment is left behind
        if isinstance(exc, Canceled) or not isinstance(exc, OSError | BuildFailed):
            raise
        raise BuildFailed(f"environment {short} could not be built: {exc}") from exc
    log(f"cloudlet-agent: environment {short} built in {time.monotonic() - began:.1f} s\n")


def find_conda(env: Mapping[str, str] | None = None) -> str | None:
    """``micromamba``, ``mamba`` or ``conda`` on PATH: a node with one builds conda files with it."""
    env = os.environ if env is None else env
    return next(
        filter(None, (shutil.which(n, path=env.get("PATH")) for n in ("micromamba", "mamba", "conda"))), None
    )


def _conda_create(
    target: Path,
    conda: tuple[str, dict[str, Any]],
    run: Callable[[str, list[str]], None],
    env: dict[str, str],
) -> None:
    """The conda file as written (conda packages, pip list, python= pin) into ``target/conda``;
    ``target/bin`` and ``target/lib`` point into it, so the environment is used as a venv is.
    Not tested against a real conda here (none on these machines; a fake tool's test checks the
    steps). Its package caches go to the build cache, which a sandboxed build may write."""
    tool, conda_file = conda
    cache = build_cache(target.parent)
    cache.mkdir(parents=True, exist_ok=True)
    env.setdefault("CONDA_PKGS_DIRS", str(cache / "conda-pkgs"))
    env.setdefault("MAMBA_ROOT_PREFIX", str(cache / "mamba"))
    target.mkdir(exist_ok=True)
    spec_file = target / "conda-environment.yml"  # JSON is YAML: no YAML library on the agent
    spec_file.write_text(json.dumps(conda_file))
    prefix = str(target / "conda")
    if os.path.basename(tool) == "micromamba":
        run("micromamba create", [tool, "create", "-y", "-p", prefix, "-f", str(spec_file)])
    else:
        run("conda env create", [tool, "env", "create", "-q", "-p", prefix, "-f", str(spec_file)])
    for sub in ("bin", "lib"):
        (target / sub).symlink_to(Path("conda") / sub)


def _sandboxed(
    target: Path,
    uv: str | None,
    env: dict[str, str],
    sandbox: Sandbox | None,
    interpreter: str = sys.executable,
) -> list[Bind]:
    """Prepare a sandboxed build: its target made and handed to the sandbox user, the download
    cache beside the environment cache (uv's and pip's, shared by the host's builds; copied into
    the venv, never hard-linked, so a later build cannot change an environment through it). The
    binds the build sees; none without a sandbox."""
    if sandbox is None or not sandbox.enabled:
        return []
    from cloudlet.nodekit.sandbox import Bind, is_under

    cache = build_cache(target.parent)
    target.mkdir()
    sandbox.hand_over(target)
    sandbox.hand_over(cache, create=True)
    for sub in ("uv", "pip"):
        sandbox.hand_over(cache / sub, create=True)
    env.update(
        {
            "HOME": "/tmp",
            "UV_CACHE_DIR": str(cache / "uv"),
            "PIP_CACHE_DIR": str(cache / "pip"),
            "UV_LINK_MODE": "copy",
            "UV_PYTHON_DOWNLOADS": "never",  # the venv's Python is the node's: nothing to download
        }
    )
    binds = [Bind(str(target), writable=True), Bind(str(cache), writable=True)]
    if uv and not is_under(os.path.realpath(uv), sandbox.visible):
        binds.append(Bind(uv))
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(interpreter)))  # <prefix>/bin/python3.X
    if not is_under(os.path.realpath(interpreter), sandbox.visible):
        binds.append(Bind(prefix))
    return binds


def overlay(venv: Path, target: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A run's own venv at TARGET over the cached VENV (which the run must not change): the cached
    packages importable through a ``.pth`` file, ``pip`` installing into TARGET. Returns the
    variables that make it the run's: TARGET's bin first on PATH, then VENV's (its console scripts).
    Made with the standard library's venv on VENV's base interpreter (``-I -S``: no site code)."""
    base_python = os.path.realpath(venv / "bin" / "python")
    done = subprocess.run(
        [base_python, "-I", "-S", "-m", "venv", "--without-pip", "--symlinks", str(target)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        why = done.stderr.strip() or done.stdout.strip()
        raise BuildFailed(f"cannot make the run's venv at {target}: {why}")
    below = sorted((venv / "lib").glob("python*/site-packages"))
    for site in (target / "lib").glob("python*/site-packages"):
        (site / "_cloudlet_environment.pth").write_text("".join(f"{p}\n" for p in below))
    if any((p / "pip").is_dir() for p in below):  # pip's module comes from below; it installs here
        main = "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
        script = f"#!{target / 'bin' / 'python'}\n{main}"
        for name in ("pip", "pip3"):
            path = target / "bin" / name
            path.write_text(script)
            path.chmod(0o755)
    search = os.pathsep.join([str(target / "bin"), str(venv / "bin"), env.get("PATH") or os.defpath])
    return {"VIRTUAL_ENV": str(target), "PATH": search}


def _write_marker(path: Path, text: str) -> None:
    """As root into a folder the build's user owned: never through a link the build left there."""
    from cloudlet.nodekit import safe_paths

    safe_paths.write_bytes(str(path), text.encode())


def _run(
    step: str,
    cmd: list[str],
    log: Log,
    stop: threading.Event | None,
    env: dict[str, str],
    sandbox: Sandbox | None = None,
    binds: Sequence[Bind] = (),
) -> None:
    """Run a build step in its own process group, its output to ``log``; killed when ``stop`` is set."""
    sandboxed = sandbox is not None and sandbox.enabled
    argv = sandbox.wrap(cmd, cwd="/", binds=binds) if sandbox is not None and sandboxed else cmd
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd="/",  # outside any project: uv would read a project's configuration
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            bufsize=0,
        )
    except OSError as exc:
        raise BuildFailed(f"{step}: cannot run {cmd[0]}: {exc}") from exc
    assert proc.stdout is not None
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd, eof = proc.stdout.fileno(), False
    kill_at: float | None = None
    exited_at: float | None = None
    try:
        while not eof:
            readable, _, _ = select.select([fd], [], [], 0.1)
            if readable:
                data = os.read(fd, 65536)
                eof = not data
                text = decoder.decode(data, final=eof)
                if text:
                    log(text)
            now = time.monotonic()
            if exited_at is None:
                if stop is not None and stop.is_set() and kill_at is None:
                    _killpg(proc.pid, signal.SIGTERM)
                    kill_at = now + KILL_AFTER_S
                if kill_at is not None and now >= kill_at:
                    _killpg(proc.pid, signal.SIGKILL)
                    kill_at = float("inf")
                if proc.poll() is not None:
                    exited_at = now
                    _killpg(proc.pid, signal.SIGKILL)  # leftovers in the step's process group
            elif now - exited_at > LEFTOVER_GRACE_S:
                break
    finally:
        proc.stdout.close()
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
    if stop is not None and stop.is_set():
        raise Canceled("canceled while preparing the environment")
    if returncode != 0:
        raise BuildFailed(f"{step} exited with code {returncode}")


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
