"""Package layout only (metadata is in pyproject.toml): envs/ installs as `skillopt_envs`."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["skillopt_ray", "skillopt_ray.*"])
    + ["skillopt_envs"]
    + [f"skillopt_envs.{p}" for p in find_packages("envs")],
    package_dir={"skillopt_envs": "envs"},
)
