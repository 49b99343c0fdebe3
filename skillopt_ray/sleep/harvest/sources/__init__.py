"""Readers of the agent CLIs' own session stores (read-only, no network)."""
