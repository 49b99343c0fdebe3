import sys

from skillopt_ray.compare.command import main

sys.exit(main())
