"""A night's proposal: staged for review, adopted or undone as a transaction, and its status."""
