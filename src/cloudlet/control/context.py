"""What a node-making pass shares with the passes it runs beside (the cluster pass runs the
ephemeral pass): the store, who this replica is, its leases and the node recorder. A public
interface, so ``control/ephemeral.py`` needs nothing of ``ClusterReconciler``'s insides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import LeaseCache
from cloudlet.control.node_records import NodeRecorder
from cloudlet.services.core.storage import DataRoot


@dataclass(frozen=True)
class PassContext:
    sessions: sessionmaker[Session]
    replica_id: str
    installation_id: str
    data: DataRoot
    server_url: Callable[[], str]
    leases: LeaseCache
    recorder: NodeRecorder
