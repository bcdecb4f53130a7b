"""The online endpoints under ``cloudlet server --workers N``: one worker runs the replicas, every
worker's gateway serves invoke (issue 14).

Worker 0 is the **owner**: the ``OnlineRuntime`` of ``control/online_replicas.py`` (it starts,
probes, autoscales and retires the replicas while this server holds the online lease, and follows
the holder's report otherwise: ``control/online_serving.py``) plus a publisher thread that writes
the gateway's view (each endpoint's path, keys, traffic, mirror; each deployment's spec,
generation, reason and replicas with their addresses and readiness) to
``$CLOUDLET_HOME/online/view.json`` whenever it changes (looked at every ``PUBLISH_S``),
atomically, and wakes the other workers (``services/core/wake.py``, kind ``VIEW``).

Every other worker is a **follower**: its gateway reads the same in-memory shapes
(``EndpointState``/``DeploymentState``), loaded from that file on the wake-up (and every
``REFRESH_S`` when a wake-up was dropped); a deployment's state object is kept across reloads, so
its in-flight count (the 429 rule) and its metrics carry on.

Both run the online loop (``control/online_loop.py``) over the stored desired state: the owner's
in full (replicas), a follower's for its own gateway only (an endpoint's new keys and traffic at
once, its request metrics flushed to the store, so ``show`` counts every worker's). A write
through a follower wakes the owner's loop too (kind ``ASK``, op ``reconcile``); one lost in a full
inbox costs the owner's next pass at most.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from cloudlet.control.loop import one_item
from cloudlet.control.online_replicas import OnlineRuntime
from cloudlet.control.online_serving import deployment_doc, followed
from cloudlet.control.online_state import EndpointState
from cloudlet.control.replica_board_shared import MirroredBoard, PublishedBoard, board_path
from cloudlet.services.core.wake import WakeBus

log = logging.getLogger("cloudlet.online.shared")
VIEW = b"v"  # owner → followers: the view file changed
ASK = b"V"  # follower → owner: JSON {"op": ..., ...}
PUBLISH_S = 0.05
REFRESH_S = 1.0


def view_path(home: Path) -> Path:
    return home / "online" / "view.json"


def snapshot(runtime: OnlineRuntime) -> dict[str, Any]:
    """The gateway's view of RUNTIME as JSON-ready data."""
    with runtime.lock:
        endpoints = []
        for key, state in runtime.endpoints.items():
            endpoints.append(
                {
                    "id": state.id,
                    "ws_id": state.ws_id,
                    "name": state.name,
                    "auth_mode": state.auth_mode,
                    "primary": state.primary,
                    "secondary": state.secondary,
                    "traffic": state.traffic,
                    "mirror": state.mirror,
                    "paths": sorted(list(path) for path, at in runtime.paths.items() if at == key),
                    "deployments": [deployment_doc(d) for d in state.deployments.values()],
                }
            )
    return {"endpoints": sorted(endpoints, key=lambda e: (e["ws_id"], e["name"]))}


class OwnerRuntime(OnlineRuntime):
    """Worker 0's runtime: the replicas, and the view published for the other workers."""

    def __init__(self, bus: WakeBus, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bus = bus
        self.view = view_path(self.root.parent)
        # what the agents of compute instances should run, for the other workers to answer
        self.hosts.board = board = PublishedBoard(board_path(self.root.parent))
        board.publish()  # an earlier run's board is not answered to any agent
        self.publishing = threading.Lock()
        self.published = ""

    def start_watching(self) -> None:
        super().start_watching()
        thread = threading.Thread(target=self._publish, name="online-view", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _publish(self) -> None:
        while not self.stopping.is_set():
            with one_item("publishing the online view", logger=log):  # the next try may do
                self.publish()
            self.stopping.wait(PUBLISH_S)

    def publish(self) -> None:
        """The view to the file and a wake-up to the followers, when it changed."""
        text = json.dumps(snapshot(self), sort_keys=True)
        with self.publishing:
            if text == self.published:
                return
            self.view.parent.mkdir(parents=True, exist_ok=True)
            partial = self.view.with_name(f"view.{threading.get_ident()}.tmp")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds keys
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.replace(partial, self.view)
            self.published = text
        self.bus.send(VIEW)

    def _report(
        self, deployment_id: int, generation: int, stage: str, state: str, reason: str | None
    ) -> None:
        if state == "Succeeded":  # the new replicas are in the view before the store says ready
            self.publish()
        super()._report(deployment_id, generation, stage, state, reason)

    def asked(self, payload: str) -> None:
        """A follower's request, from the wake bus's thread (a bad one stops no other)."""
        with one_item("acting on another worker's request", logger=log):
            self._act(payload)

    def _act(self, payload: str) -> None:
        ask = json.loads(payload)
        op = ask["op"]
        if op == "hold":
            self._held(int(ask["ws_id"]), str(ask["endpoint"]), str(ask["deployment"]), float(ask["for_s"]))
        if op == "report":  # an agent's report of its replicas, to another worker
            self.hosts.board.report(str(ask["node"]), dict(ask["statuses"]))
        if op == "reconcile":  # the desired state changed through another worker
            self.loop.wake.set()

    def _held(self, ws_id: int, endpoint: str, name: str, for_s: float) -> None:
        """A request a follower holds for a replica counts as held here for FOR_S (its bound)."""
        state = self.endpoints.get((ws_id, endpoint))
        deployment = state.deployments.get(name) if state else None
        if deployment is None:
            return
        deployment.waiting += 1
        self.autoscaler.wake.set()

        def release() -> None:
            deployment.waiting -= 1

        timer = threading.Timer(for_s, release)
        timer.daemon = True
        timer.start()


class _AskForReplica:
    """A follower's ``autoscaler.wake``: the gateway sets it when it holds a request of an
    autoscaled deployment with no ready replica; the owner is asked to count it."""

    def __init__(self, follower: FollowerRuntime) -> None:
        self.follower = follower

    def set(self) -> None:
        with self.follower.lock:
            held = [
                (state.ws_id, state.name, d.name, d.spec.request_settings["request_timeout_ms"] / 1000)
                for state in self.follower.endpoints.values()
                for d in state.deployments.values()
                if d.waiting > 0
            ]
        for ws_id, endpoint, name, for_s in held:
            self.follower.ask(
                {"op": "hold", "ws_id": ws_id, "endpoint": endpoint, "deployment": name, "for_s": for_s}
            )


class _WakeOwnerToo(threading.Event):
    """A follower's loop's wake-up: its own pass (keys, traffic) and the owner's (replicas)."""

    def __init__(self, follower: FollowerRuntime) -> None:
        super().__init__()
        self.follower = follower

    def set(self) -> None:
        super().set()
        self.follower.ask({"op": "reconcile"})


class FollowerRuntime(OnlineRuntime):
    """Another worker's runtime: runs no replica; its gateway's view is the owner's, read from the
    view file; its loop keeps only its gateway's keys and traffic and its metrics."""

    FULL = False

    def __init__(self, bus: WakeBus, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bus = bus
        self.view = view_path(self.root.parent)
        self.seen: tuple[int, int] | None = None  # the view file's (mtime_ns, size) last read
        self.changed = threading.Event()
        self.autoscaler.wake = _AskForReplica(self)  # type: ignore[assignment]
        self.loop.wake = _WakeOwnerToo(self)
        self.hosts.board = MirroredBoard(board_path(self.root.parent), self._reported)

    def _reported(self, node_id: str, statuses: dict[str, Any]) -> None:
        self.ask({"op": "report", "node": node_id, "statuses": statuses})

    def ask(self, message: dict[str, Any]) -> None:
        self.bus.send(ASK, json.dumps(message))

    # what the app's lifespan calls
    def load(self) -> None:
        self.refresh()

    def start_watching(self) -> None:
        thread = threading.Thread(target=self._watch_view, name="online-view", daemon=True)
        self.threads.append(thread)
        thread.start()
        self.loop.start()

    def stop(self) -> None:
        self.stopping.set()
        self.changed.set()
        self.loop.stop()
        for thread in self.threads:
            thread.join(10)

    def _watch_view(self) -> None:
        while not self.stopping.is_set():
            self.changed.wait(REFRESH_S)
            self.changed.clear()
            try:
                self.refresh()
            except Exception:  # a torn or unreadable view: the next one is read
                log.exception("reading the online view failed")

    def refresh(self) -> None:
        try:
            stat = self.view.stat()
        except FileNotFoundError:
            return
        if self.seen == (stat.st_mtime_ns, stat.st_size):
            return
        self.seen = (stat.st_mtime_ns, stat.st_size)
        self.apply(json.loads(self.view.read_text()))

    def apply(self, view: dict[str, Any]) -> None:
        """The owner's VIEW in place of this worker's, keeping each deployment's state object."""
        endpoints: dict[tuple[int, str], EndpointState] = {}
        paths: dict[tuple[str, str, str, str], tuple[int, str]] = {}
        with self.lock:
            for e in view["endpoints"]:
                key = (int(e["ws_id"]), str(e["name"]))
                old = self.endpoints.get(key)
                state = EndpointState(
                    e["id"],
                    key[0],
                    key[1],
                    e["auth_mode"],
                    e["primary"],
                    e["secondary"],
                    e["traffic"],
                    e["mirror"],
                )
                for d in e["deployments"]:
                    kept = old.deployments.get(d["name"]) if old is not None and old.id == state.id else None
                    state.deployments[d["name"]] = followed(d, key[1], kept)
                endpoints[key] = state
                for path in e["paths"]:
                    paths[(path[0], path[1], path[2], path[3])] = key
            self.endpoints, self.paths = endpoints, paths

    def on_view(self, _payload: str) -> None:
        self.changed.set()


def runtime(bus: WakeBus, owner: bool, *args: Any, **kwargs: Any) -> tuple[OnlineRuntime, dict[bytes, Any]]:
    """The worker's runtime and the wake-up handlers it needs. A server alone (no peers) gets the
    plain ``OnlineRuntime``."""
    if not bus.shared:
        return OnlineRuntime(*args, **kwargs), {}
    if owner:
        made = OwnerRuntime(bus, *args, **kwargs)
        return made, {ASK: made.asked}
    follower = FollowerRuntime(bus, *args, **kwargs)
    return follower, {VIEW: follower.on_view}
