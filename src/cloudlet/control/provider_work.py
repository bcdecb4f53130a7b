"""Provider calls off the reconcile pass: a bounded pool of workers per provider.

A pass records intents in the store (a node ``requested``, a node ``terminating``) and commits;
the calls that carry them out (create, terminate, the periodic listing) go to the workers of the
node's provider. A pass never waits on a provider, so one slow provider (5 s per launch) delays
only its own nodes: other providers' clusters scale in their usual time. Crash safety is the
store's: a node whose launch was queued here when the process died is still ``requested``, and
the sweep adopts or ends it (``domain.compute.nodes.STUCK_RULES``).

Work is keyed by (kind, node id): a key already queued or running is not queued again (the sweep
re-asks for stuck terminations every couple of seconds). A termination of a node whose launch is
still in flight waits for that launch, then reads the machine's reference the launch recorded.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions, Launch, launch_node, terminate_node
from cloudlet.providers.base import NodeProvider
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.store.schema import Node

log = logging.getLogger("cloudlet.provider_work")

DEFAULT_WORKERS = 4  # per provider: bounds the calls one provider has in flight


def workers_per_provider() -> int:
    return max(1, int(os.environ.get("CLOUDLET_PROVIDER_WORKERS") or DEFAULT_WORKERS))


class ProviderWork:
    def __init__(
        self,
        providers: Mapping[str, NodeProvider],
        sessions: sessionmaker[Session],
        notifier: NodeNotifier,
        workers: int | None = None,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        self.providers = providers
        self.sessions = sessions
        self.notifier = notifier
        self.clock = clock
        self.workers = workers or workers_per_provider()
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Condition()
        self._in_flight: dict[tuple[str, str], tuple[str, Future[None]]] = {}  # key -> provider, call

    # -- what a pass hands over --------------------------------------------------------------
    def carry_out(self, actions: Actions) -> None:
        """After the pass's transaction committed: tell the agents, queue the provider calls."""
        self.notifier.deliver(actions.deliveries)
        for node_id in actions.wake:
            self.notifier.notify(node_id)
        for launch in actions.launches:
            self.launch(launch)
        for node_id, provider, ref in actions.terminations:
            self.terminate(node_id, provider, ref)

    def launch(self, launch: Launch) -> None:
        self.submit(
            launch.location,
            ("launch", launch.node_id),
            lambda: launch_node(self.providers, self.sessions, launch.location, launch.request, self.clock),
        )

    def terminate(self, node_id: str, provider: str, ref: dict[str, object]) -> None:
        with self._lock:
            launching = self._in_flight.get(("launch", node_id), (provider, None))[1]
        self.submit(
            provider, ("terminate", node_id), lambda: self._terminate(node_id, provider, ref, launching)
        )

    def submit(self, provider: str, key: tuple[str, str], work: Callable[[], None]) -> bool:
        """Queue WORK on PROVIDER's workers unless work with KEY is queued or running already."""
        with self._lock:
            if key in self._in_flight:
                return False
            pool = self._pools.get(provider)
            if pool is None:
                pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"provider-{provider}")
                self._pools[provider] = pool
            future = pool.submit(self._run, key, work)
            self._in_flight[key] = (provider, future)
            return True

    # -- what the rest of the control plane asks -----------------------------------------------
    def busy(self, kind: str, node_id: str) -> bool:
        with self._lock:
            return (kind, node_id) in self._in_flight

    def wait_idle(self, timeout_s: float, provider: str | None = None) -> bool:
        """Until nothing (of PROVIDER, or of any) is queued or running (tests, benchmarks);
        False on timeout."""

        def idle() -> bool:
            return not any(provider in (None, kind) for kind, _ in self._in_flight.values())

        with self._lock:
            return self._lock.wait_for(idle, timeout_s)

    def shutdown(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- the workers ---------------------------------------------------------------------------
    def _run(self, key: tuple[str, str], work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # the store still says what is wanted: the next pass or sweep retries
            log.exception("provider work %s %s failed", *key)
        finally:
            with self._lock:
                self._in_flight.pop(key, None)
                self._lock.notify_all()

    def _terminate(
        self, node_id: str, provider: str, ref: dict[str, object], launching: Future[None] | None
    ) -> None:
        if launching is not None:
            launching.result()  # _run never raises: this only waits
        if not ref:  # released before its launch was recorded: the launch may have recorded it since
            with self.sessions() as session:
                node = session.get(Node, node_id)
                ref = dict(node.provider_ref) if node is not None else {}
        terminate_node(self.providers, self.sessions, node_id, provider, ref, self.clock)
