"""Epoch-boundary updates: the slow update (target-facing) and the meta skill (optimizer-facing)."""
