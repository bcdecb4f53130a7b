#!/usr/bin/env bash
# The main job (README Quick start): set up, start a cloudlet server on the embedded SQLite store,
# and walk through it with the CLI: sizes, a cluster, an instance, quota, a job that scales the
# cluster from zero and streams its log, its output, and a lock that blocks scaling.
# CLOUDLET_HOME (default ./.demo-home) keeps the store; KEEP_SERVER=1 leaves the server running.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export CLOUDLET_HOME=${CLOUDLET_HOME:-$PWD/.demo-home}
mkdir -p "$CLOUDLET_HOME"
cl() { echo; echo "\$ cloudlet $*"; .venv/bin/cloudlet "$@"; }

rm -f "$CLOUDLET_HOME/config.json"
.venv/bin/cloudlet server --port "${CLOUDLET_PORT:-0}" --home "$CLOUDLET_HOME" >"$CLOUDLET_HOME/server.log" 2>&1 &
SERVER_PID=$!
[ "${KEEP_SERVER:-0}" = 1 ] || trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  if [ -f "$CLOUDLET_HOME/config.json" ] && curl -fs "$(.venv/bin/python -c 'import json,sys;print(json.load(open(sys.argv[1]))["endpoint"])' "$CLOUDLET_HOME/config.json")/healthz" >/dev/null 2>&1; then
    break
  fi
  kill -0 $SERVER_PID 2>/dev/null || { cat "$CLOUDLET_HOME/server.log"; exit 1; }
  sleep 0.2
done
echo "cloudlet server is up (home $CLOUDLET_HOME, log $CLOUDLET_HOME/server.log)"

cl workspace show
cl compute list-sizes --type computeinstance -o table | head -12
cl compute create --file examples/compute/cluster.yml
cl compute create --file examples/compute/instance.yml
echo; echo "# The instance runs JupyterLab behind cloudlet's proxy (sign in at /signin with the API key):"
.venv/bin/cloudlet compute show -n my-instance -o yaml | grep -A6 "^services:"
cl compute update -n cpu-cluster --max-instances 4
cl compute stop -n my-instance
cl compute list
cl compute list-usage -o table | head -8
echo; echo "# A job on the cluster: it scales from 0, code and data are uploaded once, the log streams:"
cl job create --file examples/jobs/train/job.yml --stream
cl compute list-nodes -n cpu-cluster
JOB=$(.venv/bin/cloudlet job list -o json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])')
cl job download -n "$JOB" --output-name model --download-path "$CLOUDLET_HOME/downloads"
cat "$CLOUDLET_HOME/downloads/named-outputs/model/model.json" | head -c 300; echo
echo; echo "# A min_instances beyond the DSv2 quota is refused, naming who holds the cores:"
cl compute create --file examples/compute/cluster.yml -n too-big --set min_instances=30 --set max_instances=30 || true
echo; echo "# A lock on the resource group freezes cluster scaling (C6); the cluster says why:"
cl lock create -n keep --level CanNotDelete --scope resource-group
cl compute show -n cpu-cluster -o yaml | grep -E "allocation_state|status_message|lock:"
cl lock delete -n keep --scope resource-group
cl compute delete -n cpu-cluster --yes
cl compute delete -n my-instance --yes
cl compute list
echo; echo "Demo finished. API docs: $(.venv/bin/python -c 'import json,sys;print(json.load(open(sys.argv[1]))["endpoint"])' "$CLOUDLET_HOME/config.json")/docs"
echo "The CLI is .venv/bin/cloudlet: \`source .venv/bin/activate\` puts cloudlet on your PATH."
