"""A night: the harvested tasks trained on by the runner's loop, its estimate, report, state and schedule."""
