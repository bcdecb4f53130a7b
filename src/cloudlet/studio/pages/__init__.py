"""The studio's pages, one module per group, each with its ``router`` and ``NAV`` entry."""
