import sys

from skillopt_ray.cluster.client import command_main

sys.exit(command_main())
