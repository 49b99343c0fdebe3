#!/usr/bin/env bash
# Start a Ray head on this machine with every port chosen free (Ray's fixed defaults for the dashboard agent,
# the runtime-env agent and metrics clash with other clusters on a busy machine: jobs then fail with
# "No available agent"). Prints the lines to paste: RAY_ADDRESS for scripts/submit_job.sh, and how to stop
# this head only (`ray stop` would stop every Ray process on the machine).
#   eval "$(scripts/start_head.sh)"        # then: scripts/submit_job.sh +experiment=alfworld llm=openai
set -euo pipefail
PY=${PYTHON:-python}
RAY=${RAY:-$(dirname "$(command -v "$PY")")/ray}
read -r GCS DASH CLIENT AGENT_HTTP AGENT_GRPC RUNTIME_ENV METRICS < <("$PY" - <<'PYEOF'
import socket
socks = []
for _ in range(7):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PYEOF
)
TEMP=$(mktemp -d /tmp/rh.XXXXXX)  # short: Ray's socket paths have a length limit
"$RAY" start --head --node-ip-address=127.0.0.1 --port="$GCS" --dashboard-port="$DASH" --dashboard-host=127.0.0.1 \
  --ray-client-server-port="$CLIENT" --dashboard-agent-listen-port="$AGENT_HTTP" --dashboard-agent-grpc-port="$AGENT_GRPC" \
  --runtime-env-agent-port="$RUNTIME_ENV" --metrics-export-port="$METRICS" --temp-dir="$TEMP" --include-dashboard=true \
  --disable-usage-stats ${SKILLOPT_HEAD_ARGS:-} >&2
echo "export RAY_ADDRESS=http://127.0.0.1:$DASH"
echo "# stop this head only (not ray stop, which stops every Ray process here): kill \$(pgrep -f -- $TEMP), then kill -9 what is left after a few seconds"
