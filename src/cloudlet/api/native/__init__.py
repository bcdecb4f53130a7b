"""The native API's JSON views of resources (the shapes cloudlet's CLI and client read).

A view renders rows and derived status for one front door; the ARM facade's views of the same
resources stand beside these in ``api/arm/``, over the same services."""
