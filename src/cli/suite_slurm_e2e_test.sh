#!/usr/bin/env bash
# `inferbench suite --executor slurm` against a real single-node Slurm: munged, slurmctld and
# slurmd from Debian (scripts/install-deps installs them), started here on private ports with a
# configuration of their own, stopped at the end. A 3-entry CPU suite runs as one job array; one
# entry fails (its dataset file is missing), is reported by --collect, and runs again after the
# file appears with --retry-failed; a task cancelled while it runs is reported with Slurm's state
# and its log. The merged leaderboard has the same entries and metric keys as the same suite run
# locally. Also: no sbatch on PATH, and a submission Slurm rejects.
# Environment (ctest sets them): INFERBENCH_BINARY. Exit 77 (skipped) without the Slurm daemons
# or without root (slurm_test_cluster.sh).
set -euo pipefail
IB=${INFERBENCH_BINARY:?set INFERBENCH_BINARY to the inferbench binary}
# ---- a private single-node Slurm in $W (exits 77 without Slurm or root)
source "$(dirname "$0")/slurm_test_cluster.sh"

# ---- the suite: three tiny CPU entries, c reading a dataset file that is not there yet
cat > "$W/suite.yaml" <<'EOF'
name: slurm-e2e
defaults: {device: cpu, dtype: fp32, load_format: dummy, batch_size: 2, input_len: 8,
           output_len: 4, num_prompts: 2, runs: 1, seed: 0, disable_tqdm: true}
entries:
  - {name: a, model: tiny-15m}
  - {name: b, model: tiny-15m, batch_size: 1}
  - {name: c, model: tiny-15m, dataset_name: jsonl, dataset_path: prompts.jsonl,
     allow_failure: true}
EOF
R=$W/results
wait_job() {  # waits for Slurm job $1 to leave the queue
  for _ in $(seq 240); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 1
  done
  fail "job $1 still queued after 240 s: $(squeue -j "$1")"
}
job_of() { grep -oE 'submitted Slurm job array [0-9]+' "$1" | awk '{print $5}'; }

# No sbatch on PATH: a user error naming the fix, nothing submitted.
set +e
env PATH=/nonexistent "$IB" suite "$W/suite.yaml" --executor slurm --result-dir "$R" > "$W/nopath.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || fail "no sbatch: exit $rc, expected 2: $(cat "$W/nopath.out")"
grep -q "sbatch is not on PATH" "$W/nopath.out" || fail "no sbatch: $(cat "$W/nopath.out")"

# A submission Slurm rejects: its message comes through, exit 1.
set +e
"$IB" suite "$W/suite.yaml" --executor slurm --result-dir "$W/rejected" \
  --slurm-partition no-such-partition > "$W/rejected.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "rejected submission: exit $rc, expected 1: $(cat "$W/rejected.out")"
grep -qi "sbatch refused" "$W/rejected.out" || fail "rejected: $(cat "$W/rejected.out")"
grep -qi "partition" "$W/rejected.out" || fail "rejected: no Slurm message: $(cat "$W/rejected.out")"

# Submit, wait, collect: a and b ok, c failed (its dataset is missing).
"$IB" suite "$W/suite.yaml" --executor slurm --result-dir "$R" > "$W/submit1.out" 2>&1 ||
  fail "submit: $(cat "$W/submit1.out")"
J1=$(job_of "$W/submit1.out"); [ -n "$J1" ] || fail "no job id: $(cat "$W/submit1.out")"
grep -q -- "--array=0-2" "$R"/slurm/array-1.sbatch || fail "array script: $(cat "$R"/slurm/array-1.sbatch)"
wait_job "$J1"
"$IB" suite "$W/suite.yaml" --result-dir "$R" --collect > "$W/collect1.out" 2>&1 ||
  fail "collect: $(cat "$W/collect1.out")"
python3 - "$R" <<'EOF' || fail "after the first collect: $(cat "$R/suite-state.json")"
import json, sys
s = {e["name"]: e for e in json.load(open(sys.argv[1] + "/suite-state.json"))["entries"]}
assert s["a"]["status"] == "ok" and s["b"]["status"] == "ok", s
assert s["c"]["status"] == "failed" and "prompts.jsonl" in s["c"]["error"], s["c"]
EOF
for t in 0 1 2; do [ -s "$R/slurm/logs/${J1}_$t.out" ] || fail "no log of task $t"; done

# Resubmitting skips finished entries, failed ones too unless --retry-failed.
"$IB" suite "$W/suite.yaml" --executor slurm --result-dir "$R" > "$W/submit2.out" 2>&1 ||
  fail "resubmit: $(cat "$W/submit2.out")"
grep -q "every entry of slurm-e2e has finished" "$W/submit2.out" || fail "resubmit: $(cat "$W/submit2.out")"
printf '{"prompt": "hello there"}\n{"prompt": "general kenobi"}\n' > "$W/prompts.jsonl"
"$IB" suite "$W/suite.yaml" --executor slurm --result-dir "$R" --retry-failed > "$W/submit3.out" 2>&1 ||
  fail "retry: $(cat "$W/submit3.out")"
J3=$(job_of "$W/submit3.out"); [ -n "$J3" ] || fail "retry: no job: $(cat "$W/submit3.out")"
grep -q "1 entry: c" "$W/submit3.out" || fail "retry submitted more than c: $(cat "$W/submit3.out")"
wait_job "$J3"
"$IB" suite "$W/suite.yaml" --result-dir "$R" --collect > "$W/collect2.out" 2>&1 ||
  fail "collect 2: $(cat "$W/collect2.out")"

# A task Slurm ends before it records anything (here scancel while it runs): --collect reports
# the entry failed with Slurm's state and the task's log, and a resubmission runs it again.
cat > "$W/slow.yaml" <<'EOF'
name: slurm-slow
defaults: {device: cpu, dtype: fp32, load_format: dummy, batch_size: 1, input_len: 8,
           output_len: 64, num_prompts: 64, runs: 1, seed: 0, disable_tqdm: true}
entries:
  - {name: slow, model: tiny-15m}
EOF
"$IB" suite "$W/slow.yaml" --executor slurm --result-dir "$W/slow" > "$W/slow1.out" 2>&1 ||
  fail "slow submit: $(cat "$W/slow1.out")"
JS=$(job_of "$W/slow1.out")
for _ in $(seq 60); do
  [ "$(squeue -h -j "$JS" -o %T 2>/dev/null)" = RUNNING ] && break
  sleep 1
done
sleep 2
scancel "$JS"
wait_job "$JS"
set +e
"$IB" suite "$W/slow.yaml" --result-dir "$W/slow" --collect > "$W/slow-collect.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "collect of a cancelled task: exit $rc: $(cat "$W/slow-collect.out")"
grep -q "ended CANCELLED" "$W/slow-collect.out" || fail "no Slurm state: $(cat "$W/slow-collect.out")"
grep -q "${JS}_0.out" "$W/slow-collect.out" || fail "no log path: $(cat "$W/slow-collect.out")"
"$IB" suite "$W/slow.yaml" --executor slurm --result-dir "$W/slow" --retry-failed \
  > "$W/slow2.out" 2>&1 || fail "slow resubmit: $(cat "$W/slow2.out")"
grep -q "1 entry: slow" "$W/slow2.out" || fail "slow resubmit: $(cat "$W/slow2.out")"
scancel "$(job_of "$W/slow2.out")"

# The same suite locally: the same entries and metric keys in the leaderboard.
"$IB" suite "$W/suite.yaml" --result-dir "$W/local" > "$W/local.out" 2>&1 || fail "local: $(cat "$W/local.out")"
python3 - "$R" "$W/local" <<'EOF' || fail "slurm and local leaderboards differ"
import csv, json, sys
def board(d):
    rows = list(csv.DictReader(open(d + "/leaderboard.csv")))
    return rows[0].keys() if rows else [], sorted(r.get("entry", "") for r in rows)
ks, es = board(sys.argv[1]); kl, el = board(sys.argv[2])
assert list(ks) == list(kl), (list(ks), list(kl))
assert es == el == ["a", "b", "c"], (es, el)
s = {e["name"]: e["status"] for e in json.load(open(sys.argv[1] + "/suite-state.json"))["entries"]}
assert s == {"a": "ok", "b": "ok", "c": "ok"}, s
for name in "abc":
    r = json.load(open(f"{sys.argv[1]}/{name}/result.json"))
    assert r, name
EOF
echo "PASS: Slurm jobs $J1 and $J3; leaderboard $R/leaderboard.md"
