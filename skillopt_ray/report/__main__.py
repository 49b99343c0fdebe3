import sys

from skillopt_ray.runs.report import main

sys.exit(main())
