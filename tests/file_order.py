"""The order the test files are handed to pytest-xdist's workers: the longest first.

``--dist loadfile`` runs each file whole on one worker, handing out the next file as a worker runs
out. By default xdist hands out the files with the most tests first, which leaves files with a few
long tests (the OpenAPI fuzzing, the SDK pipelines, the browser journeys) to the end of the run,
where one of them runs alone while the other worker idles. Handing out the longest first (and the
unit tests, seconds each, last) lets both workers finish together. Only the order changes: every
test still runs, each file's tests in their own order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# Wall seconds of the slowest files in a run of the whole suite (2 workers, a loaded 2-core
# machine; see docs/performance.md, "The CI run's time"). Rank matters, not the figures: a file
# missing here goes after these, a unit test file after every other.
SLOWEST: dict[str, float] = {
    "tests/integration/test_online_endpoints.py": 522,
    "tests/e2e/test_azureml_examples.py": 442,
    "tests/e2e/test_sweeps_cli.py": 439,
    "tests/integration/test_instance_idle_schedule.py": 310,
    "tests/integration/test_arm_sdk.py": 299,
    "tests/integration/test_metrics_endpoint.py": 244,
    "tests/integration/test_batch_samples.py": 230,
    "tests/integration/test_online_samples.py": 212,
    "tests/e2e/test_assets_cli.py": 201,
    "tests/integration/test_studio_graphs.py": 185,
    "tests/e2e/test_cli.py": 181,
    "tests/integration/test_access.py": 173,
    "tests/integration/test_pipelines.py": 172,
    "tests/e2e/test_access_cli.py": 155,
    "tests/integration/test_load.py": 152,
    "tests/integration/test_instances.py": 138,
    "tests/integration/test_online_on_nodes.py": 134,
    "tests/e2e/test_components_cli.py": 124,
    "tests/integration/test_teams_and_queue_settings.py": 124,
    "tests/integration/test_audit.py": 109,
    "tests/integration/test_launcher.py": 102,
    "tests/integration/test_studio_sessions.py": 95,
    "tests/integration/test_events.py": 95,
    "tests/integration/test_notifications.py": 93,
    "tests/integration/test_studio_online.py": 93,
    "tests/integration/test_slurm_location.py": 92,
    "tests/integration/test_batch_invoke_overrides.py": 90,
    "tests/integration/test_upload_limits.py": 88,
    "tests/integration/test_ssh_location.py": 84,
    "tests/e2e/test_jobs_cli.py": 81,
    "tests/integration/test_job_wait_limits.py": 78,
    "tests/integration/test_isolation.py": 76,
    "tests/integration/test_envs.py": 75,
    "tests/integration/test_crashes.py": 66,
    "tests/integration/test_clusters.py": 65,
    "tests/integration/test_ssh_instance.py": 63,
    "tests/integration/test_job_wait_eta.py": 60,
    "tests/integration/test_studio_live.py": 59,
    "tests/e2e/test_azureml_environments.py": 59,
    "tests/e2e/test_client_install.py": 53,
}


class Located(Protocol):
    @property
    def nodeid(self) -> str: ...


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def cost(path: str) -> tuple[int, float]:
    """The sort key of a test file: the slowest listed first, then any other but the unit tests,
    then the unit tests (each group in the order it came)."""
    if path in SLOWEST:
        return (0, -SLOWEST[path])
    return (2, 0.0) if path.startswith("tests/unit/") else (1, 0.0)


def longest_first(items: Sequence[Located]) -> list[int]:
    """The indexes of ITEMS in the order to run them: by their file's ``cost`` (a stable sort, so
    each file's tests keep their order)."""
    return sorted(range(len(items)), key=lambda i: cost(file_of(items[i].nodeid)))
