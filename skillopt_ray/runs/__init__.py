"""What a run leaves on disk: the typed records (with the optimizer's payloads and the step buffer's entries), the
run directory that alone reads and writes them, the resumable state, progress, the report and MLflow tracking; and the
kept cluster's record, which a run reads to attach to it. Imports only base, config and skill."""
