#!/usr/bin/env bash
# Submit a training run to a Ray cluster:  RAY_ADDRESS=http://head:8265 scripts/submit_job.sh +experiment=alfworld llm=openai
# The run directory name is derived from the config, so resubmitting the same overrides resumes the same run.
# --submission-id makes the job id follow the run as well (resubmit after a failure with a new suffix).
set -euo pipefail
: "${RAY_ADDRESS:?set RAY_ADDRESS to the cluster dashboard, e.g. http://127.0.0.1:8265}"
cd "$(dirname "$0")/.."
ID="skillopt-$(echo "$*" | sha1sum | cut -c1-10)-$(date +%s)"
exec ray job submit --submission-id "$ID" --runtime-env scripts/runtime_env.yaml --working-dir . -- \
  python -m skillopt_ray ray=cluster debug.progress=plain "$@"
