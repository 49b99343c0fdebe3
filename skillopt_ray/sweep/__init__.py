"""The sweep command (`python -m skillopt_ray.sweep`): its spec, its trials on Ray Tune, its report."""
