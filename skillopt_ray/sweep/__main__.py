import sys

from skillopt_ray.sweep.command import main

sys.exit(main())
