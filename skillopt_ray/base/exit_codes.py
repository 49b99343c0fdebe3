"""Process exit codes shared by the CLI and the driver's outcome records."""

EXIT_OK = 0
EXIT_ERROR = 1  # the run failed (endpoint down, infrastructure failures, a bug)
EXIT_CONFIG = 2  # bad input: config, data, key, output dir, Ray address
EXIT_STOPPED = 3  # stopped cleanly (budget cap, interruption): rerun to resume
