"""The skill document as text: its protected regions and appendix, the edits applied to it, echo checks. Imports
nothing of the package, so the records may use it."""
