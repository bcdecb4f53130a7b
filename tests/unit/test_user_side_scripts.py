"""Scripts cloudlet copies into a deployment's code run on the deployment's Python, which Azure's
samples pin as old as 3.8 (heart-classifier-mlflow: ``python=3.8.5``): nothing in them may need a
newer one at run time. ruff checks their syntax for 3.8 (pyproject: per-file-target-version);
this checks what parses on 3.8 and fails when it runs (a ``dict | list`` union outside an
annotation, ``str.removeprefix``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cloudlet

SCRIPTS = [Path(cloudlet.__file__).parent / "scoring" / "mlflow_scorer.py"]
SCRIPTS.append(Path(cloudlet.__file__).parent / "nodekit" / "batch_driver.py")
NEWER_METHODS = {"removeprefix", "removesuffix"}  # 3.9


def _annotations(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
            every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            every += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            annotations += [a.annotation for a in every]
        for annotation in annotations:
            if annotation is not None:
                inside.update(id(n) for n in ast.walk(annotation))
    return inside


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_user_side_script_runs_on_python_3_8(script: Path) -> None:
    tree = ast.parse(script.read_text(), feature_version=(3, 8))
    annotated = _annotations(tree)
    problems = []
    for node in ast.walk(tree):
        union = isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and id(node) not in annotated
        if union and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Name):  # type: ignore[attr-defined]
            names = {node.left.id, node.right.id}  # type: ignore[attr-defined]
            if names <= {"dict", "list", "tuple", "set", "str", "int", "float", "bytes", "type"}:
                problems.append(f"line {node.lineno}: a {' | '.join(sorted(names))} union (use a tuple)")
        if isinstance(node, ast.Attribute) and node.attr in NEWER_METHODS:
            problems.append(f"line {node.lineno}: .{node.attr} (Python 3.9)")
    assert problems == [], f"{script.name}: {problems}"
