"""Experiment tracking's pure rules, in MLflow's terms (its REST API: api/mlflow/).

- a job's run status follows its job's status (``run_status``);
- what a request may log: key names, value lengths, batch sizes (MLflow's own limits);
- which of two values of a metric is its latest (highest step, then timestamp, then value);
- MLflow's search syntax (``metrics.loss < 0.5 and params.lr = '0.1'``), parsed into clauses and
  evaluated on a run's attributes, metrics, params and tags; ``order_by`` likewise;
- page tokens (an offset, base64 JSON, as MLflow's own store makes them).

Errors are ``CloudletError`` with MLflow's error codes (``INVALID_PARAMETER_VALUE``, …): the
MLflow routes answer them as ``{"error_code", "message"}``.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_status import JobStatus

INVALID = "INVALID_PARAMETER_VALUE"
NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
EXISTS = "RESOURCE_ALREADY_EXISTS"

RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
TERMINAL_RUN_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
_FROM_JOB = {
    JobStatus.QUEUED: "SCHEDULED",
    JobStatus.PREPARING: "SCHEDULED",
    JobStatus.RUNNING: "RUNNING",
    JobStatus.FINALIZING: "RUNNING",
    JobStatus.COMPLETED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELED: "KILLED",
}

# MLflow's limits (mlflow/utils/validation.py).
MAX_KEY_CHARS = 250
MAX_PARAM_VALUE_CHARS = 6000
MAX_TAG_VALUE_CHARS = 8000
MAX_EXPERIMENT_NAME_CHARS = 256
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
MAX_BATCH_ENTITIES = 1000
MAX_RESULTS = 50_000
DEFAULT_RUN_RESULTS = 1000
DEFAULT_EXPERIMENT_RESULTS = 1000
# MLflow's: alphanumerics, _ - . space / (and : for tags), no '..' segment; the OpenAPI document
# carries these patterns, so a client reads the rule the server applies.
KEY_PATTERN = r"^(?!(.*/)?\.\.(/.*)?$)[\w\-. /:]+$"
_KEY = re.compile(KEY_PATTERN)
# A metric's value as a string: protobuf JSON's non-finite names or a decimal number.
METRIC_STRING_PATTERN = r"^(NaN|-?Infinity|[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?)$"
_METRIC_STRING = re.compile(METRIC_STRING_PATTERN)
NAME_PATTERN = r"\S"  # an experiment's name: not only white space


def invalid(message: str, target: str | None = None) -> CloudletError:
    return CloudletError(INVALID, message, target, 400)


def not_found(message: str) -> CloudletError:
    return CloudletError(NOT_FOUND, message, None, 404)


def run_status(job_status: str) -> str:
    """A job's run's status: Completed ⇒ FINISHED, Failed ⇒ FAILED, Canceled ⇒ KILLED; waiting
    ⇒ SCHEDULED, working ⇒ RUNNING."""
    return _FROM_JOB.get(JobStatus(job_status), "RUNNING")


def check_status(status: str) -> str:
    if status not in RUN_STATUSES:
        raise invalid(
            f"status '{status}' is not a run status; use one of {', '.join(RUN_STATUSES)}", "status"
        )
    return status


def check_key(key: str, what: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS or not _KEY.match(key):
        raise invalid(
            f"invalid {what} name '{key[:300]}': use at most {MAX_KEY_CHARS} letters, digits, "
            "underscores, dashes, periods, spaces, slashes or colons (no '..' segment)",
            "key",
        )
    return key


def check_param(key: str, value: str) -> tuple[str, str]:
    check_key(key, "param")
    if len(value) > MAX_PARAM_VALUE_CHARS:
        raise invalid(
            f"param '{key}' has a value of {len(value)} characters; at most {MAX_PARAM_VALUE_CHARS}", "value"
        )
    return key, value


def check_tag(key: str, value: str) -> tuple[str, str]:
    check_key(key, "tag")
    if len(value) > MAX_TAG_VALUE_CHARS:
        raise invalid(
            f"tag '{key}' has a value of {len(value)} characters; at most {MAX_TAG_VALUE_CHARS}", "value"
        )
    return key, value


def check_experiment_name(name: str) -> str:
    if not name.strip() or len(name) > MAX_EXPERIMENT_NAME_CHARS:
        raise invalid(
            f"experiment name must be 1 to {MAX_EXPERIMENT_NAME_CHARS} characters (got {len(name)})", "name"
        )
    return name


def check_batch(metrics: int, params: int, tags: int) -> None:
    """MLflow's log-batch limits, named with the counts that broke them."""
    for count, most, what in (
        (metrics, MAX_BATCH_METRICS, "metrics"),
        (params, MAX_BATCH_PARAMS, "params"),
        (tags, MAX_BATCH_TAGS, "tags"),
    ):
        if count > most:
            raise invalid(f"a batch may log at most {most} {what} (got {count}); send several batches", what)
    if metrics + params + tags > MAX_BATCH_ENTITIES:
        raise invalid(
            f"a batch may log at most {MAX_BATCH_ENTITIES} metrics, params and tags together "
            f"(got {metrics + params + tags}); send several batches"
        )


def check_max_results(value: int | None, default: int) -> int:
    if value is None:
        return default
    if not 1 <= value <= MAX_RESULTS:
        raise invalid(f"max_results must be between 1 and {MAX_RESULTS} (got {value})", "max_results")
    return value


# -- metric values -------------------------------------------------------------------------------
def metric_value(raw: float | int | str) -> float:
    """A metric's value as sent: a number, or protobuf JSON's "NaN", "Infinity", "-Infinity"."""
    if isinstance(raw, bool):
        raise invalid("a metric value must be a number (got a boolean)", "value")
    if isinstance(raw, int | float):
        return float(raw)
    names = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    if raw in names:
        return names[raw]
    if not _METRIC_STRING.match(raw):
        raise invalid(f"a metric value must be a number (got '{raw[:50]}')", "value")
    return float(raw)


def wire_value(value: float, is_nan: bool = False) -> float | str:
    """A metric's value as MLflow's JSON carries it (non-finite values as protobuf's strings)."""
    if is_nan or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def latest_key(step: int, timestamp: int, value: float) -> tuple[int, int, bool, float]:
    """What orders a metric's values to find its latest: step, then timestamp, then value (NaN
    below every number), as MLflow's stores do."""
    nan = math.isnan(value)
    return (step, timestamp, not nan, 0.0 if nan else value)


# -- search ------------------------------------------------------------------------------------
ENTITIES = {
    "metric": "metric",
    "metrics": "metric",
    "param": "param",
    "params": "param",
    "parameter": "param",
    "parameters": "param",
    "tag": "tag",
    "tags": "tag",
    "attribute": "attribute",
    "attributes": "attribute",
    "attr": "attribute",
    "run": "attribute",
    "dataset": "dataset",
    "datasets": "dataset",
}
RUN_ATTRIBUTES = {
    "run_id": "run_id",
    "run_name": "run_name",
    "status": "status",
    "user_id": "user_id",
    "start_time": "start_time",
    "end_time": "end_time",
    "artifact_uri": "artifact_uri",
    "lifecycle_stage": "lifecycle_stage",
    "created": "start_time",
    "Created": "start_time",
}
EXPERIMENT_ATTRIBUTES = {
    "name": "name",
    "creation_time": "creation_time",
    "last_update_time": "last_update_time",
}
_NUMERIC_ATTRIBUTES = frozenset({"start_time", "end_time", "creation_time", "last_update_time"})
_COMPARATORS = ("!=", "<=", ">=", "=", "<", ">")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
    | (?P<op>!=|<=|>=|=|<|>|\(|\)|,)
    | (?P<word>(?:[A-Za-z_][\w]*)(?:\.(?:`[^`]*`|"[^"]*"|[\w\-./:]+))?)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Clause:
    entity: str  # metric | param | tag | attribute | dataset
    key: str
    op: str  # = != < <= > >= LIKE ILIKE IN NOT IN
    value: Any  # str, float, or a tuple of str (IN)


@dataclass
class Searchable:
    """What a search filter and ordering read of one run (or experiment)."""

    attributes: dict[str, Any]
    metrics: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise invalid(f"invalid search filter at '{text[pos : pos + 30].strip()}'", "filter")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _identifier(word: str, attributes: Mapping[str, str]) -> tuple[str, str]:
    prefix, dot, rest = word.partition(".")
    if not dot:
        entity, key = "attribute", prefix
    else:
        entity = ENTITIES.get(prefix, "")
        if not entity:
            raise invalid(
                f"invalid search identifier '{word}': start with metrics., params., tags. or attributes.",
                "filter",
            )
        key = _unquote(rest)
    if entity == "attribute":
        if key not in attributes:
            known = ", ".join(sorted(set(attributes.values())))
            raise invalid(f"invalid attribute '{key}' in the search filter; use one of {known}", "filter")
        key = attributes[key]
    return entity, key


def parse_filter(text: str | None, attributes: Mapping[str, str] = RUN_ATTRIBUTES) -> list[Clause]:
    """MLflow's search filter: clauses joined by AND (MLflow has no OR)."""
    if not text or not text.strip():
        return []
    tokens = _tokens(text)
    clauses: list[Clause] = []
    i = 0
    while i < len(tokens):
        kind, word = tokens[i]
        if kind != "word":
            raise invalid(
                f"invalid search filter: expected a metric, param, tag or attribute at '{word}'", "filter"
            )
        entity, key = _identifier(word, attributes)
        i += 1
        op, i = _operator(tokens, i)
        value, i = _operand(tokens, i, op, entity, key)
        clauses.append(Clause(entity, key, op, value))
        if i < len(tokens):
            if tokens[i][1].upper() != "AND":
                raise invalid(
                    f"invalid search filter: join clauses with AND (got '{tokens[i][1]}')", "filter"
                )
            i += 1
            if i == len(tokens):
                raise invalid("invalid search filter: it ends with AND", "filter")
    return clauses


def _operator(tokens: list[tuple[str, str]], i: int) -> tuple[str, int]:
    if i >= len(tokens):
        raise invalid("invalid search filter: a comparison is missing its operator", "filter")
    word = tokens[i][1].upper()
    if word == "NOT" and i + 1 < len(tokens) and tokens[i + 1][1].upper() == "IN":
        return "NOT IN", i + 2
    if word in ("LIKE", "ILIKE", "IN") or word in _COMPARATORS:
        return word, i + 1
    raise invalid(f"invalid comparator '{tokens[i][1]}'; use =, !=, <, <=, >, >=, LIKE, ILIKE, IN", "filter")


def _operand(tokens: list[tuple[str, str]], i: int, op: str, entity: str, key: str) -> tuple[Any, int]:
    if i >= len(tokens):
        raise invalid("invalid search filter: a comparison is missing its value", "filter")
    if op in ("IN", "NOT IN"):
        if tokens[i][1] != "(":
            raise invalid(f"{op} takes a parenthesised list of strings: ('a', 'b')", "filter")
        values: list[str] = []
        i += 1
        while i < len(tokens) and tokens[i][1] != ")":
            if tokens[i][0] != "str":
                raise invalid(f"{op} takes a list of quoted strings (got {tokens[i][1]})", "filter")
            values.append(_unquote(tokens[i][1]))
            i += 1
            if i < len(tokens) and tokens[i][1] == ",":
                i += 1
        if i >= len(tokens):
            raise invalid(f"{op}'s list is not closed with ')'", "filter")
        return tuple(values), i + 1
    kind, raw = tokens[i]
    numeric = entity == "metric" or (entity == "attribute" and key in _NUMERIC_ATTRIBUTES)
    if numeric:
        if kind != "num" or op in ("LIKE", "ILIKE"):
            raise invalid(f"'{key}' compares with a number and =, !=, <, <=, >, >= (got {raw})", "filter")
        return float(raw), i + 1
    if kind != "str":
        raise invalid(f"'{key}' compares with a quoted string (got {raw})", "filter")
    if op not in ("=", "!=", "LIKE", "ILIKE"):
        raise invalid(f"'{key}' is a string: compare it with =, !=, LIKE or ILIKE (got {op})", "filter")
    return _unquote(raw), i + 1


def _like(pattern: str, value: str, fold: bool) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if fold else re.DOTALL) is not None


def _compare(op: str, left: Any, right: Any) -> bool:
    if left is None:
        return False
    if op in ("IN", "NOT IN"):
        return (left in right) == (op == "IN")
    if op in ("LIKE", "ILIKE"):
        return _like(right, str(left), op == "ILIKE")
    if isinstance(right, float):
        if isinstance(left, float) and math.isnan(left):
            return False
        left = float(left)
    return {
        "=": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[op]


def _value_of(item: Searchable, entity: str, key: str) -> Any:
    if entity == "metric":
        return item.metrics.get(key)
    if entity == "param":
        return item.params.get(key)
    if entity == "tag":
        return item.tags.get(key)
    return item.attributes.get(key)


def matches(item: Searchable, clauses: list[Clause]) -> bool:
    return all(_compare(c.op, _value_of(item, c.entity, c.key), c.value) for c in clauses)


@dataclass(frozen=True)
class Order:
    entity: str
    key: str
    ascending: bool


def parse_order_by(items: list[str] | None, attributes: Mapping[str, str] = RUN_ATTRIBUTES) -> list[Order]:
    orders: list[Order] = []
    for raw in items or []:
        text = raw.strip()
        ascending = True
        upper = text.upper()
        if upper.endswith(" DESC"):
            text, ascending = text[:-5].strip(), False
        elif upper.endswith(" ASC"):
            text = text[:-4].strip()
        tokens = _tokens(text) if text else []
        if len(tokens) != 1 or tokens[0][0] != "word":
            raise invalid(f"invalid order_by clause '{raw}': '<identifier> [ASC|DESC]'", "order_by")
        entity, key = _identifier(tokens[0][1], attributes)
        if entity == "dataset":
            raise invalid(f"invalid order_by clause '{raw}': datasets cannot order runs", "order_by")
        orders.append(Order(entity, key, ascending))
    return orders


def sort(items: list[Searchable], orders: list[Order], default: list[Order]) -> list[Searchable]:
    """Stable sorts from the last key to the first; missing values go last either way (as in
    MLflow's store)."""
    result = list(items)
    for order in reversed(orders + default):

        def key(item: Searchable, order: Order = order) -> tuple[int, Any]:
            value = _value_of(item, order.entity, order.key)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                return (1, 0)
            return (0, value)

        present = [i for i in result if key(i)[0] == 0]
        missing = [i for i in result if key(i)[0] == 1]
        present.sort(key=lambda i: key(i)[1], reverse=not order.ascending)
        result = present + missing
    return result


# -- pages -------------------------------------------------------------------------------------
def page_offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = int(json.loads(base64.b64decode(token))["offset"])
    except (ValueError, KeyError, TypeError):
        raise invalid(
            "invalid page_token; pass the next_page_token of the previous page", "page_token"
        ) from None
    if offset < 0:
        raise invalid("invalid page_token; pass the next_page_token of the previous page", "page_token")
    return offset


def page_token(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()
