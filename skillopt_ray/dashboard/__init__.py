"""A web dashboard to launch, watch and compare runs: `python -m skillopt_ray.dashboard`.

- `views`    what the page shows, read from run directories (nothing recomputed)
- `launcher` the launch form as CLI overrides, checked like the CLI, run as a process or a Ray job
- `server`   the Starlette app serving the page (`static/`) and its JSON
"""
