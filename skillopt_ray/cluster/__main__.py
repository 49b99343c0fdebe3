import sys

from skillopt_ray.cluster.command import main

sys.exit(main())
