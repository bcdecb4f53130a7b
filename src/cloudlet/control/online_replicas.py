"""The replicas of online deployments, and what the gateway knows of each endpoint (issue 14).

Each deployment instance is a replica: the real ``azureml-inference-server-http`` (``azmlinfsrv``)
with ``AML_APP_ROOT`` (the unpacked code), ``AZUREML_ENTRY_SCRIPT`` and ``AZUREML_MODEL_DIR``, on
127.0.0.1 on a port of its own, so a score.py written for Azure ML runs as is. A deployment's
generation goes through its stages — ``provisioning`` (its folder), ``model_download`` (code and
model unpacked), ``server_start`` (processes started, readiness probe until ready) — in a thread of
its own, never on the event loop; the stage and, when one fails, the reason (the server log's
tail: a failing ``init()`` shows there) are written to the store. Updates surge then drain: the new
generation's replicas must all be ready before they take the place of the old ones, so a failed
update leaves the previous generation serving.

The server's interpreter does not run replicas: they run with ``$CLOUDLET_INFERENCE_PYTHON``'s
environment (``scripts/setup.sh`` makes ``.cache/inference-server-1.5.1``), whose packages
(Flask, gunicorn, inference-schema, scikit-learn) would clash with the control plane's.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import shutil
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import one_item
from cloudlet.control.online_autoscaler import Autoscaler
from cloudlet.control.online_inflight import InFlightBoard
from cloudlet.control.online_loop import OnlineLoop
from cloudlet.control.online_placement import AgentHosts, Placement
from cloudlet.control.online_state import DeploymentState, EndpointState, Replica
from cloudlet.control.replica_hosts import LocalProcess, NodeMaker, ReplicaBoard
from cloudlet.control.replica_process import ProcessReplicas
from cloudlet.domain.endpoints import online_autoscale as policy
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.scoring import mlflow_scorer
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints import online_endpoints as service
from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint, Workspace

log = logging.getLogger("cloudlet.online")
READY_CAP_S = 120.0  # the readiness wait is Azure's probe budget, bounded by this
LOG_TAIL = 3000
DRAIN_S = 10.0  # the longest a retired replica's requests are waited for
LOG_FRESH_S = 3.0  # get-logs waits this long at most for a node's next report
MLFLOW_SCORER = Path(mlflow_scorer.__file__)  # a no-code MLflow deployment's scoring script


def default_python() -> str:
    given = os.environ.get("CLOUDLET_INFERENCE_PYTHON")
    if given:
        return given
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / ".cache" / "inference-server-1.5.1" / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return "python3"


def tail(path: Path, size: int = LOG_TAIL) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


_RAISED = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?(?P<kind>[A-Za-z_]\w*(?:Error|Exception|Exit))(?::\s*(?P<what>.*))?$"
)


def log_failure(text: str) -> str:
    """A replica's log tail led by the last exception it shows that is not the inference server's
    own wrapper (``RuntimeError: init failed on purpose``), so the reason's start says what failed
    (clients cut long messages: azure-core keeps 2,048 characters)."""
    raised = [m.group(0) for line in text.splitlines() if (m := _RAISED.match(line.strip()))]
    own = [r for r in raised if "azureml_inference_server_http" not in r] or raised
    return f"{own[-1]}. Log tail: {text}" if own else text


class OnlineRuntime:
    """Runs the replicas and holds the gateway's view of every endpoint; ``loop``
    (``control/online_loop.py``) converges both on the store."""

    FULL = True  # this worker may run the replicas (control/online_shared.py: not a follower)

    def __init__(
        self,
        sessions: sessionmaker[Session],
        data: DataRoot,
        home: Path,
        python: str | None = None,
        installation: str = "",
        nodes: NodeMaker | None = None,
        inflight: InFlightBoard | None = None,
        replica_id: str = "",
        lease_ttl_s: float = 10.0,
    ) -> None:
        # Every replica carries the installation id (as node agents do), so what outlives a killed
        # server is found by it (the sandbox's --die-with-parent does not always take it along).
        self.installation = installation
        self.sessions = sessions
        self.data = data
        self.root = home / "online"
        self.python = python or default_python()
        self.inflight = inflight  # under --workers: requests in flight counted across the workers
        self.endpoints: dict[tuple[int, str], EndpointState] = {}
        # The scoring URI's (subscription, resource group, workspace, endpoint) → the key above.
        self.paths: dict[tuple[str, str, str, str], tuple[int, str]] = {}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.stopping = threading.Event()
        self.spawner = ThreadPoolExecutor(1, thread_name_prefix="online-spawner")
        # Process replicas' environments beside the local provider's job environments (its
        # default cache), so a deployment and a job of the same packages share one build.
        self.processes = ProcessReplicas(
            self.python, home / "envs", installation, self.spawner, self.stopping
        )
        self.autoscaler = Autoscaler(self)
        # Replicas on nodes' agents: instances', and nodes made for managed deployments.
        self.hosts = AgentHosts(sessions, ReplicaBoard(), nodes, self.python, self.stopping)
        self.rolling: dict[int, int] = {}  # deployment id → the generation rolled out (or rolling)
        # REPLICA_ID holds the online lease while this server runs the replicas (online_serving)
        self.loop = OnlineLoop(self, sessions, self.FULL, replica_id=replica_id, lease_ttl_s=lease_ttl_s)

    def in_flight(self, deployment: DeploymentState) -> int:
        """DEPLOYMENT's requests in flight: this process's, or every worker's under --workers."""
        return deployment.in_flight if self.inflight is None else self.inflight.total(deployment.id)

    def count_in_flight(self, deployment: DeploymentState, replica: Replica, delta: int) -> None:
        deployment.in_flight += delta
        replica.in_flight += delta
        if self.inflight is not None:
            self.inflight.add(deployment.id, delta)

    # --- the store's view -------------------------------------------------------------------

    def start_watching(self) -> None:
        self.loop.start()
        scaler = threading.Thread(target=self.autoscaler.run, name="online-autoscale", daemon=True)
        self.threads.append(scaler)
        scaler.start()

    def watch_once(self) -> None:
        """Liveness, once per pass of the loop: a replica whose process ended, or that failed
        ``failure_threshold`` liveness probes in a row (after ``initial_delay``, every ``period``),
        is replaced by a new process on the same code and model; it takes traffic again once its
        readiness probe answers. Each replica is its own: one that fails stops no other's watch."""
        with self.lock:
            deployments = [d for e in self.endpoints.values() for d in e.deployments.values()]
        for deployment in deployments:
            for replica in list(deployment.replicas):
                if not replica.retired:
                    with one_item(f"watching a replica of {deployment.name}", logger=log):
                        self._check(deployment, replica)

    def _check(self, deployment: DeploymentState, replica: Replica) -> None:
        probe, now = deployment.spec.liveness_probe, time.monotonic()
        alive = replica.proc.poll() is None
        if alive and not replica.ready:  # a restarted one: ready once its readiness probe answers
            replica.ready = _probe(
                replica.host, replica.port, float(deployment.spec.readiness_probe["timeout"])
            )
            return
        if alive and now >= max(replica.next_probe, replica.started + probe["initial_delay"]):
            replica.next_probe = now + probe["period"]
            live = _probe(replica.host, replica.port, float(probe["timeout"]))
            replica.failures = 0 if live else replica.failures + 1
        if alive and replica.failures < probe["failure_threshold"]:
            return
        log.warning(
            "replica of %s on port %d is dead or not live: restarting it", deployment.name, replica.port
        )
        self.retire([replica])
        if replica.code_dir is None or replica.model_dir is None or self.stopping.is_set():
            return
        try:
            fresh = self.start_replica(
                deployment.spec, replica.code_dir, replica.model_dir, replica.log_path, deployment.placement
            )
        except Exception as exc:  # e.g. no node could be made: the next look tries again
            log.warning("restarting a replica of %s failed: %s", deployment.name, exc)
            return
        with self.lock:
            kept = any(r is replica for r in deployment.replicas)  # not scaled in meanwhile
            deployment.replicas = [fresh if r is replica else r for r in deployment.replicas]
            deployment.restarts += 1
        if not kept:
            fresh.stop()

    def load(self) -> None:
        """At start, the loop's first pass: if this server takes the lease (a server alone always
        does), replicas a killed predecessor left behind are ended and every stored deployment
        starts again (``control/online_serving.take_over``); else it follows the holder's report."""
        self.loop.run_pass()

    def sync_endpoint(self, row: OnlineEndpoint, ref: WorkspaceRef | None = None) -> None:
        with self.lock:
            key = (row.workspace_id, row.name)
            if ref is not None:
                self.paths[(ref.subscription_id, ref.resource_group, ref.workspace, row.name)] = key
            state = self.endpoints.get(key)
            spec = service.spec_of(row)
            if state is None or state.id != row.id:
                state = EndpointState(row.id, row.workspace_id, row.name, spec.auth_mode, "", "", {}, {})
                self.endpoints[key] = state
            state.primary, state.secondary = row.primary_key, row.secondary_key
            state.traffic, state.mirror = dict(spec.traffic), dict(spec.mirror_traffic)

    def endpoint(self, ws_id: int, name: str) -> EndpointState | None:
        return self.endpoints.get((ws_id, name))

    def by_path(self, sub: str, rg: str, ws: str, name: str) -> EndpointState | None:
        key = self.paths.get((sub, rg, ws, name))
        return None if key is None else self.endpoints.get(key)

    def live(self, session: Session, ws_id: int, endpoint: str, deployment: str) -> dict[str, Any]:
        """What ``show`` says of a deployment's replicas, with its metrics (every worker's: stored
        in SESSION, the caller's, plus this worker's not flushed yet)."""
        state = self.endpoints.get((ws_id, endpoint))
        found = state.deployments.get(deployment) if state else None
        if found is None:
            return {"replicas": [], "ready_replicas": 0}
        return found.live(self.loop.metrics_of(session, found))

    def latencies(self, ws_id: int, endpoint: str, deployment: str) -> tuple[tuple[float, float], ...]:
        """The latencies of DEPLOYMENT's last requests through this worker's gateway (wall time, ms)."""
        state = self.endpoints.get((ws_id, endpoint))
        found = state.deployments.get(deployment) if state else None
        if found is None:
            return ()
        for _ in range(3):  # the gateway appends on the event loop while this thread copies
            try:
                return tuple(found.recent)
            except RuntimeError:
                continue
        return ()

    # --- deploying ----------------------------------------------------------------------------

    def deploy(self, endpoint: OnlineEndpoint, row: OnlineDeployment, ref: WorkspaceRef) -> None:
        """Start ROW's generation in a thread: ready replicas replace the serving ones."""
        self.rolling[row.id] = row.generation  # taken up: the loop does not start it again
        spec = rules.parse_deployment(row.spec, endpoint.name, row.name)
        self.sync_endpoint(endpoint, ref)
        makes_nodes = self.hosts.nodes is not None
        placement = Placement.of(spec, endpoint.workspace_id, row.id, row.local, makes_nodes)
        count = policy.first_count(spec.scale_settings, spec.instance_count, row.autoscaled_instances)
        args = (endpoint.workspace_id, endpoint.name, row.id, row.generation, spec, placement, count)
        thread = threading.Thread(target=self._roll_out, args=args, name=f"online-{row.name}", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()

    def _stored_generation(self, deployment_id: int) -> int | None:
        with self.sessions() as session:
            row = session.get(OnlineDeployment, deployment_id)
            return None if row is None else row.generation

    def _report(
        self, deployment_id: int, generation: int, stage: str, state: str, reason: str | None
    ) -> None:
        with self.sessions() as session:
            # Fenced: a holder that lost the lease (a pause past its TTL) writes nothing. Its
            # roll-out's replicas were ended by the new holder's take-over, which rolls the same
            # generation out again; a "Failed" from here would overwrite that roll-out's progress.
            if not self.loop.fenced(session):
                return
            service.record_stage(session, deployment_id, generation, stage, state, reason)
            session.commit()
        if state == "Succeeded":  # its replicas to the serving report (other servers) at once
            self.loop.wake.set()

    def _roll_out(
        self,
        ws_id: int,
        endpoint: str,
        deployment_id: int,
        generation: int,
        spec: rules.DeploymentSpec,
        placement: Placement,
        count: int,
    ) -> None:
        """COUNT: the replicas to start (autoscale's stored count, or ``instance_count``)."""
        folder = self.root / str(ws_id) / endpoint / spec.name / str(generation)
        replicas: list[Replica] = []
        stage = "provisioning"
        try:
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "logs").mkdir(parents=True)
            stage = "model_download"
            self._report(deployment_id, generation, stage, "Updating", None)
            code_dir, model_dir = self._materialize(ws_id, spec, folder)
            if placement.kind == "process" and count:
                stage = "environment"  # built once here; each replica's start finds it built
                self._report(deployment_id, generation, stage, "Updating", None)
                self.processes.interpreter(spec, folder, folder / "logs" / "replica-0.log")
            stage = "server_start"
            self._report(deployment_id, generation, stage, "Updating", None)
            for index in range(count):
                log_path = folder / "logs" / f"replica-{index}.log"
                replicas.append(self.start_replica(spec, code_dir, model_dir, log_path, placement))
            self._wait_ready(spec, replicas)
        except Exception as exc:  # the reason goes to the store; the serving generation stays
            reason = f"{stage} failed: {exc}"
            log.warning("deployment %s/%s generation %d: %s", endpoint, spec.name, generation, reason)
            self.retire(replicas)
            self._report(deployment_id, generation, stage, "Failed", reason)
            with self.lock:
                state = self.endpoints.get((ws_id, endpoint))
                current = state.deployments.get(spec.name) if state else None
                if current is not None and not current.ready():
                    current.reason = reason
                elif state is not None and current is None:
                    state.deployments[spec.name] = DeploymentState(
                        deployment_id, spec.name, spec, placement, reason=reason
                    )
            return
        current_generation = self._stored_generation(deployment_id)
        with self.lock:
            state = self.endpoints.get((ws_id, endpoint))
            stale = current_generation != generation or not self.loop.leading
            if state is None or self.stopping.is_set() or stale:
                # deleted meanwhile, a newer generation asked for, the lease lost: these never serve
                old: list[Replica] = replicas
            else:
                current = state.deployments.get(spec.name)
                if current is None or current.id != deployment_id:
                    current = DeploymentState(deployment_id, spec.name, spec)
                    state.deployments[spec.name] = current
                old = current.replicas
                current.spec, current.generation, current.replicas = spec, generation, replicas
                current.placement = placement
                current.code_dir, current.model_dir, current.started = code_dir, model_dir, len(replicas)
                current.samples = []
                current.reason, current.log_path = None, replicas[0].log_path if replicas else None
        if spec.scale_settings is not None and old is not replicas:
            self.loop.store_autoscaled(deployment_id, len(replicas))
        self._report(deployment_id, generation, "ready", "Succeeded", None)
        self.retire(old)  # drain: the gateway no longer picks them

    def _materialize(self, ws_id: int, spec: rules.DeploymentSpec, folder: Path) -> tuple[Path, Path]:
        code_dir, model_dir = folder / "code", folder / "model"
        with self.sessions() as session:
            ws = session.get(Workspace, ws_id)
            assert ws is not None
            source = service.model_source(session, ws, spec.model)
        if spec.code is not None:
            _unpack(self.data.code(ws_id, spec.code.removeprefix("codes/")), code_dir)
        else:  # an MLflow model without a scoring script: cloudlet's scorer, with the model's flavor
            code_dir.mkdir(parents=True)
            shutil.copyfile(MLFLOW_SCORER, code_dir / spec.scoring_script)
        kind, where = service.model_path(self.data, ws_id, source)
        if kind == "code":
            _unpack(Path(where), model_dir)
        else:  # as on Azure: the folder (or file) lies under AZUREML_MODEL_DIR by its name
            model_dir.mkdir()
            target = Path(where)
            if not target.exists():
                raise FileNotFoundError(f"the model's files are missing: {source}")
            (model_dir / target.name).symlink_to(target, target_is_directory=target.is_dir())
        if not (code_dir / spec.scoring_script).is_file():
            raise FileNotFoundError(f"the code has no scoring script '{spec.scoring_script}'")
        return code_dir, model_dir

    def start_replica(
        self,
        spec: rules.DeploymentSpec,
        code_dir: Path,
        model_dir: Path,
        log_path: Path,
        placement: Placement | None = None,
    ) -> Replica:
        """One replica where PLACEMENT says: a node's agent (an instance's, or a node made for it),
        else a sandboxed process here."""
        if placement is not None and placement.kind != "process":
            host, port, hosted = self.hosts.start(
                placement, spec, code_dir, model_dir, log_path, self.stopping
            )
            return Replica(port, hosted, log_path, host, code_dir=code_dir, model_dir=model_dir)
        port, proc = self.processes.start(spec, code_dir, model_dir, log_path)
        return Replica(port, LocalProcess(proc), log_path, code_dir=code_dir, model_dir=model_dir)

    def _wait_ready(self, spec: rules.DeploymentSpec, replicas: list[Replica]) -> None:
        probe = spec.readiness_probe
        budget = min(READY_CAP_S, probe["initial_delay"] + probe["period"] * probe["failure_threshold"])
        deadline = time.monotonic() + budget
        for replica in replicas:
            while not replica.ready:
                if replica.proc.poll() is not None:
                    raise RuntimeError(
                        f"the inference server exited ({replica.proc.returncode}): "
                        f"{log_failure(tail(replica.log_path))}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"not ready within {budget:.0f} s: {log_failure(tail(replica.log_path))}"
                    )
                replica.ready = _probe(replica.host, replica.port, float(probe["timeout"]))
                if not replica.ready:
                    self.stopping.wait(0.1)
                if self.stopping.is_set():
                    raise RuntimeError("the server is stopping")

    def retire(self, replicas: list[Replica], drain_s: float = DRAIN_S) -> None:
        """Take REPLICAS out of the gateway's choice, let the requests they hold finish (bounded
        by DRAIN_S), then stop them."""
        for replica in replicas:
            replica.ready, replica.retired = False, True
        deadline = time.monotonic() + drain_s
        while (
            any(r.in_flight > 0 and r.proc.poll() is None for r in replicas) and time.monotonic() < deadline
        ):
            if self.stopping.wait(0.02):
                break
        for replica in replicas:
            replica.stop()

    def logs(self, ws_id: int, endpoint: str, name: str, lines: int) -> str:
        folder = self.root / str(ws_id) / endpoint / name
        generations = sorted((p for p in folder.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
        if not generations:
            return ""
        with self.lock:  # a node's replica: its log as of the agent's next report
            state = self.endpoints.get((ws_id, endpoint))
            found = state.deployments.get(name) if state else None
            nodes = {getattr(r.proc, "node_id", None) for r in (found.replicas if found else [])}
        self.hosts.board.await_report({n for n in nodes if n}, LOG_FRESH_S, self.stopping)
        text = tail(generations[-1] / "logs" / "replica-0.log", 1 << 20)
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        self.stopping.set()
        self.loop.stop()
        for thread in self.threads:
            thread.join(10)
        with self.lock:
            states = list(self.endpoints.values())
            self.endpoints.clear()
        for state in states:
            for deployment in state.deployments.values():
                self.retire(deployment.replicas)
        self.spawner.shutdown(wait=False)


def _probe(host: str, port: int, timeout: float) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _unpack(archive: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(target, filter="data")
