"""A pipeline as the studio's full-page graph draws it (pure): its steps (as ``pipeline_dag.dag_steps``
gives them, with each step's component, inputs, outputs and timings), its own inputs and outputs as
nodes, and one edge per binding, named by the ports it joins (``train.model → score.model_in``).

A step input bound to another step's input (``${{parent.jobs.a.inputs.x}}``) is followed to what
that step is given (``pipeline_dag.follow``), so its edge starts where the data comes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.jobs.parent_jobs import ChildView
from cloudlet.domain.jobs.pipeline_bindings import input_binding, output_binding
from cloudlet.domain.jobs.pipeline_dag import DagStep, dag_steps, follow, step_outputs

STEP, INPUT, OUTPUT = "step", "input", "output"  # the kinds of node


@dataclass(frozen=True)
class GraphEdge:
    """Data passed from SOURCE's port to TARGET's port; a node is ``(kind, name)``."""

    source: tuple[str, str]
    source_port: str
    target: tuple[str, str]
    target_port: str

    @property
    def label(self) -> str:
        return f"{_end(self.source, self.source_port)} → {_end(self.target, self.target_port)}"


def _end(node: tuple[str, str], port: str) -> str:
    kind, name = node
    if kind == STEP:
        return f"{name}.{port}"
    return f"{kind}s.{name}"  # inputs.<name> / outputs.<name>: the pipeline's own


@dataclass(frozen=True)
class GraphStep:
    """A step of the graph: its ``DagStep``, the component it runs (in words), what each input is
    given (a binding's source in words, or the literal value), its outputs' types, and when it ran."""

    step: DagStep
    display_name: str  # the step's display_name, else its key
    component: str
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None


@dataclass(frozen=True)
class PipelineGraph:
    steps: list[GraphStep]
    inputs: list[str]  # the pipeline's declared inputs
    outputs: list[str]  # the pipeline's declared outputs
    edges: list[GraphEdge]


def component_of(step: Mapping[str, Any]) -> str:
    """What a step runs, in words: ``train:3``, a registered reference, or ``inline command``."""
    raw = step.get("component")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):
        name = raw.get("display_name") or raw.get("name")
        version = raw.get("version")
        if name:
            return f"{name}:{version}" if version else str(name)
        return f"inline {raw.get('type') or 'command'} component"
    return f"inline {step.get('type') or 'command'}"


def _given(value: Any) -> str:
    """A literal input as the panel shows it."""
    if isinstance(value, Mapping):
        shown = value.get("path", value.get("value", value.get("default")))
        return "" if shown is None else str(shown)
    return "" if value is None else str(value)


def graph(doc: Mapping[str, Any], children: Sequence[ChildView]) -> PipelineGraph:
    """DOC's graph (a parsed pipeline), its steps' state from CHILDREN."""
    by_key = {child.key: child for child in children}
    edges: list[GraphEdge] = []
    steps: list[GraphStep] = []
    for dag_step in dag_steps(doc, children):
        key = dag_step.key
        step = doc["jobs"][key]
        given: dict[str, str] = {}
        for name, value in (step.get("inputs") or {}).items():
            target = f"jobs.{key}.inputs.{name}"
            source = follow(doc, value, target)
            binding = input_binding(source, target)
            if binding is None:
                given[name] = _given(source)
                continue
            if binding.kind == "input":
                edge = GraphEdge((INPUT, binding.name), binding.name, (STEP, key), name)
            else:  # a step's output (upstream_of refused every other kind when it was parsed)
                edge = GraphEdge((STEP, str(binding.step)), binding.name, (STEP, key), name)
            edges.append(edge)
            given[name] = _end(edge.source, edge.source_port)
        for name, value in (step.get("outputs") or {}).items():
            bound = output_binding(value, f"jobs.{key}.outputs.{name}")
            if bound is not None:
                edges.append(GraphEdge((STEP, key), name, (OUTPUT, bound.name), bound.name))
        child = by_key.get(key)
        steps.append(
            GraphStep(
                step=dag_step,
                display_name=str(step.get("display_name") or key),
                component=component_of(step),
                inputs=given,
                outputs=step_outputs(step),
                started_at=child.started_at if child else None,
                ended_at=child.ended_at if child else None,
            )
        )
    return PipelineGraph(
        steps=steps,
        inputs=list(doc.get("inputs") or {}),
        outputs=list(doc.get("outputs") or {}),
        edges=edges,
    )
