"""`gbatch mcp serve`: gbatch's tools for coding agents (Model Context Protocol)."""
