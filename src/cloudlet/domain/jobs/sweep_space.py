"""A sweep job's search space (pure): Azure ML's parameter expressions and how each is sampled.

``search_space`` maps a hyperparameter's name to an expression in Azure's shape (CLI v2 sweep YAML):

=============== ============================ ==================================================
type            fields                       value
=============== ============================ ==================================================
choice          values                       one of ``values``
randint         upper                        an integer in ``[0, upper)``
uniform         min_value, max_value         uniform in ``[min_value, max_value]``
quniform        min_value, max_value, q      ``round(uniform(min_value, max_value) / q) * q``
loguniform      min_value, max_value         ``exp(uniform(min_value, max_value))``
qloguniform     min_value, max_value, q      ``round(exp(uniform(min_value, max_value)) / q) * q``
normal          mu, sigma                    normal with mean ``mu`` and deviation ``sigma``
qnormal         mu, sigma, q                 ``round(normal(mu, sigma) / q) * q``
lognormal       mu, sigma                    ``exp(normal(mu, sigma))``
qlognormal      mu, sigma, q                 ``round(exp(normal(mu, sigma)) / q) * q``
=============== ============================ ==================================================

A ``q`` variant with a whole-number ``q`` gives integers (``--batch-size 32``, not ``32.0``).

Optuna samples each expression in an *internal* space (``optuna_distribution``); ``to_value`` turns
the internal sample into the hyperparameter's value and ``to_internal`` turns a value a trial was
given back into the internal space, so a study can be rebuilt from the trials alone:

- ``choice`` → a categorical; ``randint`` → integers ``0..upper-1``; ``uniform`` → a float range;
  ``loguniform`` → a log-scaled float range ``[exp(min_value), exp(max_value)]``: the same law.
- ``q`` variants sample their continuous law and round it (exactly Azure's definition). Rounding
  loses where in its ``q``-wide bucket the sample fell: a rebuilt study places the trial at the
  rounded value (clipped to the range), which is what a model of the objective should see anyway.
- ``normal`` and ``lognormal`` have no Optuna distribution (it has no unbounded one): they are
  sampled as ``u`` uniform in ``[1e-12, 1 - 1e-12]`` and mapped through the normal quantile
  function, ``mu + sigma * Φ⁻¹(u)`` — the normal law, cut at about ±7 σ (a ~2·10⁻¹² tail).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cloudlet.domain.errors import validation_error
from cloudlet.domain.validation import FieldProblem, translate

if TYPE_CHECKING:  # optuna is imported where a trial is sampled (a server dependency only)
    from optuna.distributions import BaseDistribution

Literal_ = str | int | float | bool
TYPES = (
    "choice",
    "randint",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "normal",
    "qnormal",
    "lognormal",
    "qlognormal",
)
# Azure's rules: grid sampling takes only ``choice``; bayesian only choice, uniform and quniform.
GRID_TYPES = frozenset({"choice"})
BAYESIAN_TYPES = frozenset({"choice", "uniform", "quniform"})
MAX_CHOICES = 10_000
MAX_EXP = 700.0  # exp(709) is the largest finite double: log-uniform bounds stay below it
_EPS = 1e-12
_STD = NormalDist()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Choice(_Strict):
    type: Literal["choice"]
    values: list[Literal_] = Field(min_length=1, max_length=MAX_CHOICES)


class Randint(_Strict):
    type: Literal["randint"]
    upper: int = Field(ge=1, le=2**53)


class _Range(_Strict):
    min_value: float
    max_value: float
    q: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        if self.min_value >= self.max_value:
            raise FieldProblem(
                "max_value", f"max_value ({self.max_value}) must be greater than min_value ({self.min_value})"
            )
        return self


class Uniform(_Range):
    type: Literal["uniform"]


class QUniform(_Range):
    type: Literal["quniform"]
    q: float = Field(gt=0)


class LogUniform(_Range):
    """``min_value``/``max_value`` are the logarithms of the range's ends (Azure's definition)."""

    type: Literal["loguniform"]
    min_value: float = Field(ge=-MAX_EXP, le=MAX_EXP)
    max_value: float = Field(ge=-MAX_EXP, le=MAX_EXP)


class QLogUniform(LogUniform):
    type: Literal["qloguniform"]  # type: ignore[assignment]
    q: float = Field(gt=0)


class _Normal(_Strict):
    mu: float
    sigma: float = Field(gt=0)
    q: float | None = None


class Normal(_Normal):
    type: Literal["normal"]


class QNormal(_Normal):
    type: Literal["qnormal"]
    q: float = Field(gt=0)


class LogNormal(_Normal):
    type: Literal["lognormal"]
    mu: float = Field(ge=-MAX_EXP / 2, le=MAX_EXP / 2)
    sigma: float = Field(gt=0, le=MAX_EXP / 20)


class QLogNormal(LogNormal):
    type: Literal["qlognormal"]  # type: ignore[assignment]
    q: float = Field(gt=0)


Expression = Annotated[
    Choice
    | Randint
    | Uniform
    | QUniform
    | LogUniform
    | QLogUniform
    | Normal
    | QNormal
    | LogNormal
    | QLogNormal,
    Field(discriminator="type"),
]
_BY_TYPE: dict[str, type[_Strict]] = {
    "choice": Choice,
    "randint": Randint,
    "uniform": Uniform,
    "quniform": QUniform,
    "loguniform": LogUniform,
    "qloguniform": QLogUniform,
    "normal": Normal,
    "qnormal": QNormal,
    "lognormal": LogNormal,
    "qlognormal": QLogNormal,
}


# ----------------------------------------------------------------------------------------------
# Parsing.


def parse_space(doc: Any, prefix: str = "search_space") -> dict[str, dict[str, Any]]:
    """Validate ``search_space``; returns its stored form (each expression with its fields)."""
    if not isinstance(doc, dict) or not doc:
        raise validation_error(
            prefix,
            "search_space must map each hyperparameter to an expression, e.g. "
            "{learning_rate: {type: uniform, min_value: 0.01, max_value: 0.9}}",
        )
    out: dict[str, dict[str, Any]] = {}
    for name, item in doc.items():
        target = f"{prefix}.{name}"
        if not isinstance(name, str) or not name.isidentifier():
            raise validation_error(target, f"hyperparameter name {name!r} must be letters, digits and '_'")
        out[name] = parse_expression(item, target)
    return out


def parse_expression(item: Any, target: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise validation_error(
            target, f"'{target}' must be a mapping such as {{type: choice, values: [16, 32]}}"
        )
    kind = item.get("type")
    model = _BY_TYPE.get(kind.lower()) if isinstance(kind, str) else None
    if model is None:
        raise validation_error(
            f"{target}.type", f"unknown expression type {kind!r}; use one of: {', '.join(TYPES)}"
        )
    if model is Choice and any(isinstance(v, dict | list) for v in item.get("values") or []):
        raise validation_error(
            f"{target}.values",
            "nested search spaces (a choice of mappings) are not supported; give a list of literals "
            "(strings, numbers, booleans)",
        )
    try:
        parsed = model.model_validate({**item, "type": kind.lower()})  # type: ignore[union-attr]
    except ValidationError as exc:
        raise translate(exc, model, f"a {kind} expression", target) from None
    dumped = parsed.model_dump(mode="json", exclude_none=True)
    return {"type": dumped.pop("type"), **dumped}


def grid_size(space: Mapping[str, Mapping[str, Any]]) -> int:
    """How many points a grid over ``space`` has (every expression is a ``choice``)."""
    return math.prod(len(expr["values"]) for expr in space.values())


def example_value(expr: Mapping[str, Any]) -> Literal_:
    """A value the expression can take (to check a trial's command before any trial runs)."""
    return to_value(expr, _middle(expr))


# ----------------------------------------------------------------------------------------------
# Optuna's view.


def optuna_distribution(expr: Mapping[str, Any]) -> BaseDistribution:
    """The distribution Optuna samples the expression's internal value from."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    kind = expr["type"]
    if kind == "choice":
        return CategoricalDistribution(list(expr["values"]))
    if kind == "randint":
        return IntDistribution(0, int(expr["upper"]) - 1)
    if kind in ("uniform", "quniform"):
        return FloatDistribution(float(expr["min_value"]), float(expr["max_value"]))
    if kind in ("loguniform", "qloguniform"):
        return FloatDistribution(math.exp(expr["min_value"]), math.exp(expr["max_value"]), log=True)
    return FloatDistribution(_EPS, 1.0 - _EPS)  # the normal family: a quantile u


def to_value(expr: Mapping[str, Any], internal: Any) -> Literal_:
    """The hyperparameter's value for Optuna's internal sample."""
    kind = expr["type"]
    if kind == "choice":
        return internal
    if kind == "randint":
        return int(internal)
    if kind in ("uniform", "loguniform"):
        return float(internal)
    if kind in ("quniform", "qloguniform"):
        return _quantize(float(internal), float(expr["q"]))
    x = expr["mu"] + expr["sigma"] * _STD.inv_cdf(min(max(float(internal), _EPS), 1.0 - _EPS))
    if kind in ("lognormal", "qlognormal"):
        x = math.exp(x)
    if kind in ("qnormal", "qlognormal"):
        return _quantize(x, float(expr["q"]))
    return x


def to_internal(expr: Mapping[str, Any], value: Any) -> Any:
    """The internal value a trial given ``value`` stands at; ``None`` when the expression cannot
    have produced it (a choice it does not list, a value of the wrong type)."""
    kind = expr["type"]
    if kind == "choice":
        for choice in expr["values"]:
            if _same(choice, value):
                return choice
        return None
    number = _number(value)
    if number is None:
        return None
    if kind == "randint":
        return int(number) if number == int(number) and 0 <= number < expr["upper"] else None
    if kind in ("uniform", "quniform"):
        return min(max(number, float(expr["min_value"])), float(expr["max_value"]))
    if kind in ("loguniform", "qloguniform"):
        low, high = math.exp(expr["min_value"]), math.exp(expr["max_value"])
        return min(max(number, low), high)
    if kind in ("lognormal", "qlognormal"):
        number = math.log(number) if number > 0 else -math.inf
    z = (number - expr["mu"]) / expr["sigma"]
    return min(max(_STD.cdf(z) if math.isfinite(z) else (0.0 if z < 0 else 1.0), _EPS), 1.0 - _EPS)


def _middle(expr: Mapping[str, Any]) -> Any:
    kind = expr["type"]
    if kind == "choice":
        return expr["values"][0]
    if kind == "randint":
        return 0
    if kind in ("uniform", "quniform"):
        return (expr["min_value"] + expr["max_value"]) / 2
    if kind in ("loguniform", "qloguniform"):
        return math.exp((expr["min_value"] + expr["max_value"]) / 2)
    return 0.5


def _quantize(x: float, q: float) -> int | float:
    k = math.floor(x / q + 0.5)
    if q == int(q):
        return int(k * int(q))
    return float(f"{k * q:.12g}")  # 0.30000000000000004 → 0.3


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _same(choice: Any, value: Any) -> bool:
    """A choice and the value a trial was given, which may have come back through a job document
    as a string (``"32"`` for ``32``)."""
    if type(choice) is type(value):
        return bool(choice == value)
    if isinstance(choice, bool) or isinstance(value, bool):
        return str(choice).lower() == str(value).lower()
    if isinstance(choice, int | float) and not isinstance(choice, bool):
        number = _number(value)
        return number is not None and float(choice) == number
    return str(choice) == str(value)
