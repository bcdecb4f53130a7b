"""Pure rules of access: workspace roles and what each allows."""
