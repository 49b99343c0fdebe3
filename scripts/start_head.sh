#!/usr/bin/env bash
# Start a Ray head on this machine with every port chosen free (Ray's fixed defaults for the dashboard agent,
# the runtime-env agent and metrics clash with other clusters on a busy machine: jobs then fail with
# "No available agent"). Prints the lines to paste: RAY_ADDRESS for scripts/submit_job.sh, and how to stop
# this head only (`ray stop` would stop every Ray process on the machine).
#   eval "$(scripts/start_head.sh)"        # then: scripts/submit_job.sh +experiment=alfworld llm=openai
# The head starts in a session of its own, so every one of its processes (GCS, raylet, dashboard and its
# modules, agents, workers, the client server) is in one process group: the printed stop command signals that
# group only, waits for it to empty and SIGKILLs what is left after 10 s.
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
export RAY GCS DASH CLIENT AGENT_HTTP AGENT_GRPC RUNTIME_ENV METRICS TEMP
export SKILLOPT_HEAD_ARGS=${SKILLOPT_HEAD_ARGS:-}
# setsid: a new session and process group (its id written first), which every process of the head inherits
setsid -w bash -c 'echo $$ > "$TEMP/pgid"; exec "$RAY" start --head --node-ip-address=127.0.0.1 --port="$GCS" \
  --dashboard-port="$DASH" --dashboard-host=127.0.0.1 --ray-client-server-port="$CLIENT" \
  --dashboard-agent-listen-port="$AGENT_HTTP" --dashboard-agent-grpc-port="$AGENT_GRPC" \
  --runtime-env-agent-port="$RUNTIME_ENV" --metrics-export-port="$METRICS" --temp-dir="$TEMP" \
  --include-dashboard=true --disable-usage-stats $SKILLOPT_HEAD_ARGS' >&2
PGID=$(cat "$TEMP/pgid")
cat > "$TEMP/stop.sh" <<STOP
#!/usr/bin/env bash
# Stop the Ray head of $TEMP (process group $PGID) and nothing else.
kill -TERM -- -$PGID 2>/dev/null || { echo "head $TEMP: already stopped"; exit 0; }
for _ in \$(seq 50); do pgrep -g $PGID >/dev/null || { echo "head $TEMP: stopped"; exit 0; }; sleep 0.2; done
kill -KILL -- -$PGID 2>/dev/null
for _ in \$(seq 25); do pgrep -g $PGID >/dev/null || { echo "head $TEMP: stopped (SIGKILL after 10 s)"; exit 0; }; sleep 0.2; done
echo "error: processes of head $TEMP (group $PGID) are still alive: \$(pgrep -g $PGID | tr '\n' ' ')" >&2
exit 1
STOP
echo "export RAY_ADDRESS=http://127.0.0.1:$DASH"
echo "# stop this head only (not ray stop, which stops every Ray process here): bash $TEMP/stop.sh"
