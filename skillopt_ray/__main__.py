import sys

from skillopt_ray.cli.app import main

sys.exit(main())
