"""A node's one owner reference (services/compute/nodes.py): who owns it, and the query shapes that find
a compute's or a job's nodes (compiled, not run)."""

from __future__ import annotations

from sqlalchemy import bindparam, select

from cloudlet.domain.resources import COMPUTES, JOBS
from cloudlet.services.compute import nodes as node_service
from cloudlet.store.schema import Node


def test_the_owner_is_a_compute_or_a_job() -> None:
    cluster_node = Node(id="n-1", owner_type=COMPUTES, owner_id=7)
    job_node = Node(id="n-2", owner_type=JOBS, owner_id=7)
    assert (node_service.compute_of(cluster_node), node_service.job_of(cluster_node)) == (7, None)
    assert (node_service.compute_of(job_node), node_service.job_of(job_node)) == (None, 7)


def test_owner_queries_name_the_type_and_the_id() -> None:
    by_compute = select(Node.id).where(node_service.owned_by_compute(bindparam("compute")))
    sql = str(by_compute.compile(compile_kwargs={"render_postcompile": True}))
    assert "nodes.owner_type = :owner_type_1 AND nodes.owner_id = :compute" in sql
    by_job = select(Node.id).where(node_service.owned_by_job(3)).compile()
    assert by_job.params == {"owner_type_1": JOBS, "owner_id_1": 3}
