"""Data: the asset pages of kind `data` (list, versions, details, register, archive), made by
``asset_pages.kind_pages``."""

from cloudlet.studio.pages.asset_pages import kind_pages

NAV, router = kind_pages("data", "Data", "data", "data")
