"""One view per resource: the JSON a resource is shown as, built from its rows and derived
status inside the use case's transaction. Every front door renders these: the native API and the
CLI as they are, the ARM facade translated to Azure's wire shapes (``api/arm/``), the studio."""
