"""Harvest: session stores read, redacted, mined into a reviewed folder of tasks."""
