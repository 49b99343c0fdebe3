import sys

from skillopt_ray.compare.transfer import main

sys.exit(main())
