#!/usr/bin/env bash
# `inferbench run --backend openai --num-clients N --client-launcher slurm` against a real
# single-node Slurm (slurm_test_cluster.sh): the clients run as the 3 tasks of one srun step
# against one `inferbench serve`; each measures itself, the concurrency and the rate are split so
# the totals are what was asked, and the merged per-request records match the same run with
# local clients in count, ids and keys; a Ctrl-C reaches the tasks through srun and each keeps
# what it measured. Also: no srun on PATH (exit 2, nothing written), and a step Slurm refuses
# (srun's message passed through, exit 1).
# Environment (ctest sets it): INFERBENCH_BINARY. Exit 77 (skipped) without Slurm or root.
set -euo pipefail
IB=${INFERBENCH_BINARY:?set INFERBENCH_BINARY to the inferbench binary}
# ---- a private single-node Slurm in $W (exits 77 without Slurm or root)
source "$(dirname "$0")/slurm_test_cluster.sh"

# ---- the server: the null model at 200 tokens/s (a request of 4 tokens takes about 20 ms)
"$IB" serve --model null --token-rate 200 --port 0 > "$W/log/serve.log" 2>&1 &
SERVE_PID=$!
trap 'kill "$SERVE_PID" 2>/dev/null || true; slurm_cluster_stop' EXIT
PORT=
for _ in $(seq 100); do
  PORT=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$W/log/serve.log" | grep -oE '[0-9]+$' | head -1 || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || fail "serve did not start: $(cat "$W/log/serve.log")"
RUN=(run --backend openai --base-url "http://127.0.0.1:$PORT" --model null --num-clients 3
     --max-concurrency 5 --num-prompts 24 --input-len 8 --output-len 4 --runs 2 --disable-tqdm)

# No srun on PATH: a user error naming the fix, no result directory.
set +e
env PATH=/nonexistent "$IB" "${RUN[@]}" --client-launcher slurm --result-dir "$W/nopath" \
  > "$W/nopath.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || fail "no srun: exit $rc, expected 2: $(cat "$W/nopath.out")"
grep -q "srun is not on PATH" "$W/nopath.out" || fail "no srun: $(cat "$W/nopath.out")"
grep -q "apt install slurm-client" "$W/nopath.out" || fail "no install hint: $(cat "$W/nopath.out")"
[ ! -e "$W/nopath" ] || fail "no srun: a result directory was written"

# A step Slurm refuses: srun's message comes through, exit 1.
set +e
"$IB" "${RUN[@]}" --client-launcher slurm --slurm-partition no-such-partition \
  --result-dir "$W/refused" > "$W/refused.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "refused step: exit $rc, expected 1: $(cat "$W/refused.out")"
grep -q "srun failed" "$W/refused.out" || fail "refused: $(cat "$W/refused.out")"
grep -qi "partition" "$W/refused.out" || fail "refused: no Slurm message: $(cat "$W/refused.out")"

# The clients as Slurm tasks, then the same run with local clients.
"$IB" "${RUN[@]}" --client-launcher slurm --slurm-arg=--overcommit \
  --result-dir "$W/slurm" > "$W/slurm.out" 2>&1 || fail "slurm clients: $(cat "$W/slurm.out")"
"$IB" "${RUN[@]}" --result-dir "$W/local" > "$W/local.out" 2>&1 ||
  fail "local clients: $(cat "$W/local.out")"
# Slurm ran them: one job of 3 tasks, named for the clients, completed.
scontrol show job -o > "$W/jobs.txt"
grep "JobName=inferbench-clients" "$W/jobs.txt" | grep "JobState=COMPLETED" | grep -q "NumTasks=3" ||
  fail "no completed 3-task client job in Slurm: $(cat "$W/jobs.txt")"
python3 - "$W/slurm" "$W/local" <<'EOF' || fail "the Slurm clients' merged result is wrong"
import json, sys
def load(d):
    r = json.load(open(d + "/result.json"))
    lines = [json.loads(l) for l in open(d + "/requests.jsonl") if l.strip()]
    return r, [l for l in lines if not l["warmup"]]
s, s_lines = load(sys.argv[1])
l, l_lines = load(sys.argv[2])
assert s["engine"]["client_launcher"] == "slurm" and l["engine"]["client_launcher"] == "local"
assert s["completed"] == l["completed"] == 24, (s["completed"], l["completed"])
assert len(s["runs"]) == 2 and s["max_concurrency"] == 5
assert "client_launcher" not in s["config"] or s["config"]["client_launcher"] == "slurm"
assert sorted(s.keys()) == sorted(l.keys()), set(s.keys()) ^ set(l.keys())
# Per-request records, merged: 2 runs x 24, ids unique, every prompt once per run, like local.
assert len(s_lines) == len(l_lines) == 48, (len(s_lines), len(l_lines))
assert len({j["id"] for j in s_lines}) == 48
for run in (0, 1):
    assert sorted(j["prompt_index"] for j in s_lines if j["run"] == run) == list(range(24))
assert sorted(s_lines[0].keys()) == sorted(l_lines[0].keys())
# Each task ran its share and measured itself: 8 prompts, 5 = 2 + 2 + 1 in flight.
shares = []
for i in range(3):
    c = json.load(open(f"{sys.argv[1]}/clients/client-{i}/result.json"))
    assert c["num_prompts"] == 8 and c["completed"] == 8, (i, c["num_prompts"], c["completed"])
    shares.append(c["max_concurrency"])
    assert "event_loop_lag_ms" in s["engine"]["clients"][i]["client"], i
assert sorted(shares) == [1, 2, 2], shares
# On one clock: every record's send time after the parent's origin, within the run's span.
assert min(j["t_send_ns"] for j in s_lines) >= 0
EOF
for i in 0 1 2; do [ -s "$W/slurm/clients/client-$i.log" ] || fail "no log of task $i"; done

# Ctrl-C: srun passes the stop on to the tasks (as SIGUSR1), which keep what they measured, and
# the merged result is marked interrupted (exit 130). Requests of 400 tokens take 2 s here.
"$IB" run --backend openai --base-url "http://127.0.0.1:$PORT" --model null --num-clients 2 \
  --max-concurrency 2 --num-prompts 40 --input-len 8 --output-len 400 --runs 1 --num-warmups 0 \
  --disable-tqdm --client-launcher slurm --slurm-arg=--overcommit --result-dir "$W/stopped" \
  > "$W/stopped.out" 2>&1 &
RUN_PID=$!
for _ in $(seq 300); do
  grep -qs "x 20 requests" "$W/stopped/clients/client-0.log" &&
    grep -qs "x 20 requests" "$W/stopped/clients/client-1.log" && break
  sleep 0.1
done
sleep 3
kill -INT "$RUN_PID"
set +e
wait "$RUN_PID"
rc=$?
set -e
[ $rc = 130 ] || fail "interrupted run: exit $rc, expected 130: $(cat "$W/stopped.out")"
python3 - "$W/stopped" <<'EOF' || fail "the interrupted run kept nothing: $(cat "$W/stopped.out")"
import json, sys
r = json.load(open(sys.argv[1] + "/result.json"))
assert r["interrupted"] is True, r.get("interrupted")
for i in range(2):
    d = f"{sys.argv[1]}/clients/client-{i}"
    assert json.load(open(d + "/result.json"))["interrupted"] is True, i
    lines = [l for l in open(d + "/requests.jsonl") if l.strip()]
    assert 0 < len(lines) < 20, (i, len(lines))  # what it had in flight or finished, not all
merged = [l for l in open(sys.argv[1] + "/requests.jsonl") if l.strip()]
assert len(merged) >= 2, len(merged)
EOF
echo "PASS: 3 client tasks under Slurm, 24 x 2 requests merged"
