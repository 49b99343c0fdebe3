"""The comparison command (`python -m skillopt_ray.compare`): runs grouped into tables with seed spreads; and the transfer table."""
