"""Package layout only (metadata is in pyproject.toml): envs/ installs as `skillopt_envs`."""

from setuptools import find_namespace_packages, setup

setup(
    # namespace discovery: the data folders (prompts, splits, the dashboard's page) are packages too, so their
    # files install with them
    packages=find_namespace_packages(include=["skillopt_ray", "skillopt_ray.*"], exclude=["*__pycache__*"])
    + ["skillopt_envs"]
    + [f"skillopt_envs.{p}" for p in find_namespace_packages("envs", exclude=["*__pycache__*"])],
    package_dir={"skillopt_envs": "envs"},
)
