"""How an attempt's runs ending settles its job (domain/jobs/job_outcome.py)."""

from __future__ import annotations

from cloudlet.domain.jobs.job_outcome import RunEnd, settle
from cloudlet.domain.jobs.job_status import JobStatus

COMPLETED, FAILED, QUEUED = JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.QUEUED

NOW = 1000.0


def test_every_process_exiting_zero_completes_the_job() -> None:
    runs = [RunEnd(1, 0, "exited", "a"), RunEnd(0, 0, "exited", "b")]
    assert settle(runs, 1, 3, False, NOW) == {
        "ended_at": NOW,
        "status": COMPLETED,
        "exit_code": 0,
        "status_message": None,
    }


def test_the_lowest_failing_rank_names_the_failure() -> None:
    runs = [
        RunEnd(2, 9, "exited", "user_logs/std_log_process_2.txt"),
        RunEnd(0, 0, "exited", "user_logs/std_log_process_0.txt"),
        RunEnd(1, 4, "canceled", "user_logs/std_log_process_1.txt"),
    ]
    outcome = settle(runs, 1, 3, False, NOW)
    assert outcome["status"] == FAILED and outcome["exit_code"] == 4
    assert outcome["error"] == {
        "code": "UserError",
        "message": "process 1 exited with code 4; see user_logs/std_log_process_1.txt",
    }
    assert "status_message" not in outcome  # the last message stays


def test_a_timeout_fails_the_job_with_the_first_nonzero_code() -> None:
    outcome = settle([RunEnd(0, None, "timeout"), RunEnd(1, 143, "canceled")], 1, 3, False, NOW)
    assert outcome["status"] == FAILED and outcome["exit_code"] == 143
    assert outcome["error"]["code"] == "JobTimeout"


def test_a_lost_node_requeues_until_the_attempts_run_out() -> None:
    requeued = settle([RunEnd(0, None, "preempted")], 1, 3, False, NOW)
    assert requeued["status"] == QUEUED and requeued["ended_at"] is None
    assert "requeued as attempt 2 of 3" in requeued["status_message"]
    last = settle([RunEnd(0, None, "lost")], 3, 3, False, NOW)
    assert last["status"] == FAILED and last["error"]["code"] == "NodeLost" and last["ended_at"] == NOW


def test_a_cancel_request_wins_over_how_the_runs_ended() -> None:
    outcome = settle([RunEnd(0, 0, "exited"), RunEnd(1, None, "preempted")], 1, 3, True, NOW)
    assert outcome == {"ended_at": NOW, "status": "Canceled", "status_message": "canceled"}


def test_a_failed_download_fails_the_job_saying_so() -> None:
    runs = [RunEnd(0, 1, "download_failed", "user_logs/std_log.txt")]
    outcome = settle(runs, 1, 3, False, NOW)
    assert outcome["status"] == FAILED and outcome["exit_code"] == 1, outcome
    assert outcome["error"]["code"] == "InputDownloadFailed", outcome
    assert "http(s) input" in outcome["error"]["message"], outcome
    assert "user_logs/std_log.txt" in outcome["error"]["message"], outcome
