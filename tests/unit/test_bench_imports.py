"""Every benchmark module imports: mypy checks only ``src/``, so a name moved in ``src/`` that a
benchmark still imports from its old module would otherwise surface only when someone runs
``python -m bench``."""

import importlib
import pkgutil

import bench


def test_every_benchmark_module_imports() -> None:
    # The ``_*_peer`` modules run in the peers' own venvs (Ray, Slurm) and are not imported here.
    names = [info.name for info in pkgutil.iter_modules(bench.__path__) if not info.name.endswith("_peer")]
    assert "mixed_load" in names and "__main__" in names
    for name in names:
        importlib.import_module(f"bench.{name}")
