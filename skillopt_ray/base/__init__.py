"""Leaf helpers that import nothing of the package: exit codes, statistics, the start-up trace, process lifelines, Ray's private APIs in one place, atomic file writes and folder checks."""
