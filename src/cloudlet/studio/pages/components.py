"""Components: the asset pages of kind `component` (list, versions, details, register, archive), made by
``asset_pages.kind_pages``."""

from cloudlet.studio.pages.asset_pages import kind_pages

NAV, router = kind_pages("component", "Components", "components", "components")
