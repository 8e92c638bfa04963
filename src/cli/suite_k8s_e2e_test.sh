#!/usr/bin/env bash
# `inferbench suite --executor k8s`: the manifests parse as a ConfigMap and Indexed Jobs in
# kubectl (a client-side dry run against a stub API server that serves only discovery, since no
# cluster is at hand), a cuda entry's pod asks for a GPU, and each Job's completion index runs its
# entry: the pod's own script, run here with JOB_COMPLETION_INDEX set, writes the entry's result
# and state, which the collect Job's pod (its script, run here) merges into the leaderboard.
# Missing --k8s-image / --k8s-pvc: exit 2.
# Environment (ctest sets them): INFERBENCH_BINARY. Exit 77 (skipped) without kubectl.
set -euo pipefail
IB=${INFERBENCH_BINARY:?set INFERBENCH_BINARY to the inferbench binary}
command -v kubectl >/dev/null || { echo "SKIP: kubectl is missing (scripts/install-deps installs it)"; exit 77; }
W=$(mktemp -d /tmp/ib-k8s-e2e.XXXXXX)
STUB=
cleanup() { [ -n "$STUB" ] && kill "$STUB" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$W/suite.yaml" <<'EOF'
name: k8s-e2e
defaults: {device: cpu, dtype: fp32, load_format: dummy, batch_size: 2, input_len: 8,
           output_len: 4, num_prompts: 2, runs: 1, seed: 0, disable_tqdm: true}
entries:
  - {name: a, model: tiny-15m}
  - {name: b, model: tiny-15m, batch_size: 1}
  - {name: g, model: tiny-15m, device: cuda, dtype: bf16, allow_failure: true}
EOF
R=$W/results
set +e
"$IB" suite "$W/suite.yaml" --executor k8s --result-dir "$R" > "$W/missing.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || fail "no --k8s-image: exit $rc: $(cat "$W/missing.out")"
grep -q -- "--k8s-image" "$W/missing.out" || fail "no --k8s-image: $(cat "$W/missing.out")"

"$IB" suite "$W/suite.yaml" --executor k8s --k8s-image registry.example/inferbench:1 \
  --k8s-pvc bench-results --k8s-namespace bench --result-dir "$R" > "$W/write.out" 2>&1 ||
  fail "write: $(cat "$W/write.out")"
[ -f "$R/k8s/configmap.yaml" ] && [ -f "$R/k8s/job-cpu.yaml" ] && [ -f "$R/k8s/job-gpu.yaml" ] ||
  fail "manifests: $(ls "$R/k8s"): $(cat "$W/write.out")"

# kubectl decodes the manifests into typed objects (client-side dry run); discovery comes from a
# stub that knows ConfigMaps and Jobs.
# The stub binds a port the kernel picks (a random one collided under a parallel ctest) and
# writes it to $W/port once it listens.
python3 - "$W/port" > "$W/stub.log" 2>&1 <<'EOF' &
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
docs = {
  "/api": {"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
  "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
      {"name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
       "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}}]},
  "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
      {"name": "configmaps", "singularName": "", "namespaced": True, "kind": "ConfigMap",
       "verbs": ["create", "get", "list", "patch", "update"]}]},
  "/apis/batch/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1",
      "resources": [{"name": "jobs", "singularName": "", "namespaced": True, "kind": "Job",
                     "verbs": ["create", "get", "list", "patch", "update"]}]},
}
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        doc = docs.get(self.path.split("?")[0])
        self.send_response(200 if doc else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(doc or {"kind": "Status", "code": 404}).encode())
    def log_message(self, *args): pass
server = HTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
EOF
STUB=$!
for _ in $(seq 150); do
  [ -s "$W/port" ] && break
  sleep 0.1
done
[ -s "$W/port" ] || fail "the API stub did not start: $(cat "$W/stub.log")"
PORT=$(cat "$W/port")
kubectl --server="http://127.0.0.1:$PORT" --cache-dir="$W/kcache" apply --dry-run=client \
  --validate=false -f "$R/k8s/" -f "$R/k8s/collect/" -o name > "$W/kubectl.out" 2>&1 ||
  fail "kubectl: $(cat "$W/kubectl.out")"
for want in configmap/inferbench-k8s-e2e-suite job.batch/inferbench-k8s-e2e-cpu \
    job.batch/inferbench-k8s-e2e-gpu job.batch/inferbench-k8s-e2e-collect; do
  grep -qx "$want" "$W/kubectl.out" || fail "kubectl did not read $want: $(cat "$W/kubectl.out")"
done
python3 - "$R/k8s" <<'EOF' || fail "manifest contents"
import sys, yaml
cpu = yaml.safe_load(open(sys.argv[1] + "/job-cpu.yaml"))
gpu = yaml.safe_load(open(sys.argv[1] + "/job-gpu.yaml"))
assert cpu["spec"]["completionMode"] == "Indexed" and cpu["spec"]["completions"] == 2, cpu["spec"]
assert cpu["spec"]["backoffLimitPerIndex"] == 0, cpu["spec"]
assert gpu["spec"]["completions"] == 1
c = gpu["spec"]["template"]["spec"]["containers"][0]
assert c["resources"]["limits"]["nvidia.com/gpu"] == 1, c
assert "resources" not in cpu["spec"]["template"]["spec"]["containers"][0]
assert cpu["metadata"]["namespace"] == "bench"
cm = yaml.safe_load(open(sys.argv[1] + "/configmap.yaml"))
assert "name: k8s-e2e" in cm["data"]["suite.yaml"]
EOF

# The CPU Job's two pods, as the cluster would run them: its script with the suite file where the
# ConfigMap puts it (here: the file itself) and inferbench on PATH; then the collect Job's pod.
mkdir -p "$W/bin"; ln -s "$IB" "$W/bin/inferbench"
pod_script() {
  python3 - "$1" "$W/suite.yaml" <<'EOF'
import sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
print(job["spec"]["template"]["spec"]["containers"][0]["args"][0].replace("/suite/suite.yaml", sys.argv[2]))
EOF
}
pod_script "$R/k8s/job-cpu.yaml" > "$W/pod.sh"
for i in 0 1; do
  JOB_COMPLETION_INDEX=$i PATH="$W/bin:$PATH" sh "$W/pod.sh" > "$W/pod$i.out" 2>&1 ||
    fail "pod $i: $(cat "$W/pod$i.out")"
done
grep -q "kubectl apply -f $R/k8s/collect/" "$W/write.out" || fail "no collect step: $(cat "$W/write.out")"
pod_script "$R/k8s/collect/job-collect.yaml" > "$W/collect.sh"
set +e
PATH="$W/bin:$PATH" sh "$W/collect.sh" > "$W/collect.out" 2>&1
rc=$?
set -e
[ $rc = 0 ] || fail "collect pod: exit $rc: $(cat "$W/collect.out")"
[ -s "$R/leaderboard.md" ] || fail "the collect pod wrote no leaderboard"
python3 - "$R" <<'EOF' || fail "states: $(cat "$R/suite-state.json")"
import json, sys
s = {e["name"]: e["status"] for e in json.load(open(sys.argv[1] + "/suite-state.json"))["entries"]}
assert s.get("a") == "ok" and s.get("b") == "ok", s
assert "g" not in s, s  # the GPU Job never ran here: not run
EOF
grep -q "no result yet: g" "$W/collect.out" || fail "collect did not name g: $(cat "$W/collect.out")"
echo "PASS: kubectl read $(wc -l < "$W/kubectl.out") objects; entries a and b ran by completion index"
