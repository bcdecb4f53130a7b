"""Models: the asset pages of kind `model` (list, versions, details with files and the MLmodel,
register from files or a job's output, archive), made by ``asset_pages.kind_pages``."""

from cloudlet.studio.pages.asset_pages import kind_pages

NAV, router = kind_pages("model", "Models", "models", "models")
