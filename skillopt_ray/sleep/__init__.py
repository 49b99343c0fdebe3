"""Skills from your own agent sessions (`python -m skillopt_ray.sleep`): the command here, its parts in harvest/
(session logs into a reviewed task folder), night/ (training on them) and proposal/ (staging, adopting, undoing)."""
