"""A job's status machine (domain/jobs/job_status.py), its kind (domain/jobs/job_kind.py), and the object
form of the one status writer (services/jobs/job_status.set_status), on objects no store holds."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_status
from cloudlet.domain.jobs.job_kind import JobKind, kind_of
from cloudlet.domain.jobs.job_status import ACTIVE, FINAL, IllegalJobTransition, JobStatus, transition
from cloudlet.services.jobs import job_status as writer
from cloudlet.store.schema import Job

S = JobStatus
NOW = 1000.0
LEGAL = [
    (S.QUEUED, S.PREPARING),  # an attempt is placed
    (S.QUEUED, S.CANCELED),  # canceled before it started
    (S.PREPARING, S.RUNNING),  # its first process reported
    (S.PREPARING, S.QUEUED),  # its nodes went away before it ran: requeued
    (S.PREPARING, S.COMPLETED),  # its runs ended before they reported running
    (S.PREPARING, S.FAILED),
    (S.PREPARING, S.CANCELED),
    (S.RUNNING, S.FINALIZING),
    (S.RUNNING, S.QUEUED),  # preempted or lost: requeued for its next attempt
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELED),
    (S.FINALIZING, S.COMPLETED),
    (S.FINALIZING, S.FAILED),
    (S.FINALIZING, S.CANCELED),
]
ILLEGAL = [
    (S.QUEUED, S.RUNNING),  # nothing runs before it is placed
    (S.QUEUED, S.COMPLETED),
    (S.QUEUED, S.FAILED),
    (S.QUEUED, S.QUEUED),
    (S.PREPARING, S.PREPARING),
    (S.RUNNING, S.PREPARING),
    (S.RUNNING, S.RUNNING),
    (S.FINALIZING, S.RUNNING),
    (S.FINALIZING, S.QUEUED),
    *[(end, to) for end in sorted(FINAL) for to in JobStatus],  # an ended job stays ended
]


@pytest.mark.parametrize(("current", "to"), LEGAL)
def test_every_legal_move_is_allowed(current: JobStatus, to: JobStatus) -> None:
    assert transition(current, to) is to
    assert transition(current.value, to) is to  # the stored (plain string) form too
    assert current in job_status.sources(to)


def test_the_legal_moves_are_exactly_the_table() -> None:
    table = {(current, to) for current, targets in job_status.TRANSITIONS.items() for to in targets}
    assert table == set(LEGAL)


@pytest.mark.parametrize(("current", "to"), ILLEGAL)
def test_an_illegal_move_is_refused_naming_both_ends(current: JobStatus, to: JobStatus) -> None:
    with pytest.raises(IllegalJobTransition) as refused:
        transition(current, to, "train-1")
    error = refused.value
    assert isinstance(error, CloudletError) and error.status == 409 and error.code == "JobStateConflict"
    assert f"job 'train-1' is {current.value}; it cannot become {to.value}" in error.message
    assert current not in job_status.sources(to)


def test_an_ended_job_is_told_so_and_an_unknown_status_moves_nowhere() -> None:
    with pytest.raises(IllegalJobTransition, match="it may become nothing: it has ended"):
        transition(S.COMPLETED, S.QUEUED)
    with pytest.raises(IllegalJobTransition, match="NotStarted"):
        transition("NotStarted", S.QUEUED)
    assert not job_status.can_move("Bogus", S.CANCELED)


def test_the_wire_values_and_sets() -> None:
    assert [s.value for s in JobStatus] == [
        "Queued",
        "Preparing",
        "Running",
        "Finalizing",
        "Completed",
        "Failed",
        "Canceled",
    ]
    assert set(JobStatus) == ACTIVE | FINAL and not ACTIVE & FINAL
    assert ACTIVE - {S.QUEUED} == job_status.WORKING
    assert job_status.INITIAL is S.QUEUED
    assert writer.ACTIVE_VALUES == ("Queued", "Preparing", "Running", "Finalizing")
    assert writer.FINAL_VALUES == ("Completed", "Failed", "Canceled")
    assert all(type(v) is str for v in (*writer.ACTIVE_VALUES, *writer.WORKING_VALUES, writer.QUEUED))


@pytest.mark.parametrize(
    ("to", "stamped"),
    [
        (S.PREPARING, {"status": "Preparing"}),
        (S.RUNNING, {"status": "Running"}),
        (S.QUEUED, {"status": "Queued", "ended_at": None}),  # requeued: waiting again
        (S.COMPLETED, {"status": "Completed", "ended_at": NOW}),
        (S.FAILED, {"status": "Failed", "ended_at": NOW}),
        (S.CANCELED, {"status": "Canceled", "ended_at": NOW}),
    ],
)
def test_what_a_move_stamps(to: JobStatus, stamped: dict[str, Any]) -> None:
    assert job_status.stamps(to, NOW) == stamped
    assert type(job_status.stamps(to, NOW)["status"]) is str  # stored as the plain value


def _job(status: JobStatus, **columns: Any) -> Job:
    return Job(name="train-1", status=status.value, status_message="waiting for nodes", **columns)


def test_set_status_moves_an_object_and_stamps_its_times() -> None:
    job = _job(S.QUEUED, started_at=None, ended_at=None)
    writer.set_status(job, S.PREPARING, NOW, message="attempt 1 on 1 node(s)")
    assert (job.status, job.status_message, job.started_at) == ("Preparing", "attempt 1 on 1 node(s)", None)
    writer.set_status(job, S.RUNNING, NOW + 1, message=None)
    assert (job.status, job.status_message, job.started_at) == ("Running", None, NOW + 1)
    writer.set_status(job, S.QUEUED, NOW + 2)  # requeued: the first start stands
    writer.set_status(job, S.PREPARING, NOW + 3)
    writer.set_status(job, S.RUNNING, NOW + 4)
    assert job.started_at == NOW + 1
    writer.set_status(job, S.FAILED, NOW + 5, exit_code=3, error={"code": "UserError", "message": "x"})
    assert (job.status, job.ended_at, job.exit_code) == ("Failed", NOW + 5, 3)
    assert job.error == {"code": "UserError", "message": "x"}


def test_set_status_leaves_what_it_is_not_given_and_refuses_an_illegal_move() -> None:
    job = _job(S.QUEUED, ended_at=None, exit_code=None, error=None)
    writer.set_status(job, S.CANCELED, NOW)
    assert (job.status, job.status_message, job.ended_at) == ("Canceled", "waiting for nodes", NOW)
    with pytest.raises(IllegalJobTransition):
        writer.set_status(job, S.RUNNING, NOW + 1)
    assert (job.status, job.ended_at, job.started_at) == ("Canceled", NOW, None)  # nothing changed


def test_a_job_document_is_of_the_kind_its_type_says() -> None:
    assert kind_of({"type": "command", "command": "echo"}) is JobKind.COMMAND
    assert kind_of({"command": "echo"}) is JobKind.COMMAND  # Azure's default type
    assert kind_of({"type": "Pipeline"}) is JobKind.PIPELINE
    with pytest.raises(ValueError, match="not a kind of job"):
        kind_of({"type": "automl"})
    assert [k.value for k in JobKind] == ["command", "pipeline", "sweep", "batch_scoring"]


SRC = Path(__file__).resolve().parents[2] / "src" / "cloudlet"


def _job_status_writes(tree: ast.AST) -> list[str]:
    """Assignments to ``<job-like>.status``, and ``setattr(<job-like>, …)`` (a column by name)."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets.append(node.target)
        found += [
            ast.unparse(node)
            for target in targets
            if isinstance(target, ast.Attribute)
            and target.attr == "status"
            and "job" in ast.unparse(target.value).lower()
        ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and "job" in ast.unparse(node.args[0]).lower()
        ):
            found.append(ast.unparse(node))
    return found


def test_only_the_status_writer_assigns_a_job_status() -> None:
    writes = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if (found := _job_status_writes(ast.parse(path.read_text())))
    }
    assert set(writes) == {"services/jobs/job_status.py"}, writes
