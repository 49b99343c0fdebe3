import sys

from skillopt_ray.sleep.cli import main

sys.exit(main())
