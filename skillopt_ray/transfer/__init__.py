"""`python -m skillopt_ray.transfer`: one skill on several targets and benchmarks (skillopt_ray.compare.transfer)."""
