"""A failed replica's reason starts with what failed (clients cut long messages)."""

from cloudlet.control.online_replicas import log_failure

LOG = """\
2026-12-02 00:25:37,722 E [3] azmlinfsrv.trace - Error while fetching model IDs
Traceback (most recent call last):
ValueError: invalid literal for int() with base 10: 'model.pkl'
2026-12-02 00:25:38,244 E [3] azmlinfsrv - Encountered Exception Traceback (most recent call last):
  File "/srv/code/score.py", line 8, in init
    raise RuntimeError("init failed on purpose")
RuntimeError: init failed on purpose

The above exception was the direct cause of the following exception:

azureml_inference_server_http.server.user_script.UserScriptException: Caught an unhandled exception
2026-12-02 00:25:38,480 E [2] gunicorn.error - Reason: Worker failed to boot.
"""


def test_the_users_last_exception_leads_and_the_tail_follows() -> None:
    text = log_failure(LOG)
    assert text.startswith("RuntimeError: init failed on purpose. Log tail: ")
    assert text.endswith(LOG)


def test_a_log_without_an_exception_is_left_as_it_is() -> None:
    assert log_failure("listening on 5001\n") == "listening on 5001\n"
    assert log_failure("") == ""
