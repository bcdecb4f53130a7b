"""Who may do what: principals, authentication and tokens, API keys, the studio's browser sessions, the
instance proxy's sign-in cookie, role assignments, workspaces (with subscriptions and resource groups),
signed URLs and the audit log."""
