import sys

from skillopt_ray.service_client import command_main

sys.exit(command_main())
