import sys

from skillopt_ray.cli import main

sys.exit(main())
