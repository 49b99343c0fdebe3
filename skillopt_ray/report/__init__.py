"""`python -m skillopt_ray.report RUN_DIR`: a run's story (skillopt_ray.runs.report)."""
