"""What a run leaves on disk: the typed records, the run directory that alone reads and writes them, the resumable state, progress, the report and MLflow tracking."""
