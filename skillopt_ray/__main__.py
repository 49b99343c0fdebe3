from skillopt_ray.cluster.client import command_exit

command_exit()
