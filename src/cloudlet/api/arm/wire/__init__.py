"""Azure Resource Manager's wire shapes for what the facade serves (azure-ai-ml's REST models):
pure translation between ARM bodies and cloudlet's native documents and views, no I/O. They sit
with the facade, not in ``domain/``: a rule of the product never depends on a wire format."""
