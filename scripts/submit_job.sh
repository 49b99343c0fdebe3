#!/usr/bin/env bash
# Submit a run to a Ray cluster:  RAY_ADDRESS=http://head:8265 scripts/submit_job.sh +experiment=alfworld llm=openai
# (a head of your own on free ports: eval "$(scripts/start_head.sh)")
# The run directory name is derived from the config, so resubmitting the same overrides resumes the same run.
# The job is named after the experiment (skillopt-<experiment>-<hash of the overrides>-<time>), so the dashboard's
# job list says what each one runs; a dashboard answers before its job agent is ready, so this waits for the agent
# (up to SKILLOPT_AGENT_WAIT_S seconds, default 90) instead of failing with HTTP 500 "No available agent": the one
# check Ray offers is a job taken, so a no-op job is submitted and deleted once it ended (`ray job list` keeps only
# real runs). The working directory is scripts/runtime_env.yaml's (this repository).
set -euo pipefail
: "${RAY_ADDRESS:?set RAY_ADDRESS to the cluster dashboard, e.g. http://127.0.0.1:8265 (or eval \"\$(scripts/start_head.sh)\")}"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
EXP=$(printf '%s\n' "$@" | sed -n 's/^+\{0,2\}experiment=//p' | tail -1)
ID="skillopt-${EXP:-run}-$(echo "$*" | sha1sum | cut -c1-10)-$(date +%s)"
"$PY" - "$RAY_ADDRESS" "${SKILLOPT_AGENT_WAIT_S:-90}" <<'PYEOF'
import sys, time
from ray.job_submission import JobStatus, JobSubmissionClient

address, wait_s = sys.argv[1], float(sys.argv[2])
deadline, last = time.monotonic() + wait_s, None
while True:  # a no-op job: the one check that the job agent takes submissions
    try:
        client = JobSubmissionClient(address)
        job = client.submit_job(entrypoint="true", metadata={"purpose": "skillopt submit_job.sh: job agent ready?"})
        while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            time.sleep(0.5)
        break
    except Exception as e:  # noqa: BLE001 - not ready yet
        last = e
        if time.monotonic() > deadline:
            sys.exit(f"error: the Ray job agent at {address} did not take a job within {wait_s:.0f}s: {str(last).splitlines()[0][:300]}")
        time.sleep(1.0)
# the check is not a run: leave no trace of it in the job list. The job's supervisor may write its record once
# more as it exits, after the status reads SUCCEEDED, so a deleted record can come back: delete until it stays gone.
try:
    gone_since = None
    for _ in range(40):
        if job in {j.submission_id for j in client.list_jobs()}:
            client.delete_job(job)
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > 3.0:
            break
        time.sleep(0.5)
except Exception as e:  # noqa: BLE001 - a leftover no-op job is harmless; say so and go on
    print(f"note: could not delete the readiness-check job {job}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
PYEOF
exec ray job submit --submission-id "$ID" --metadata-json "{\"experiment\": \"${EXP:-}\", \"name\": \"$ID\"}" \
  --runtime-env scripts/runtime_env.yaml -- \
  python -m skillopt_ray ray=cluster debug.progress=plain "$@"
