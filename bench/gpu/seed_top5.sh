#!/usr/bin/env bash
# The seed's headline rows that run on one H200 (bench/seed-top5.yaml), one run each unless
# IB_RUNS says otherwise, with the binary of an earlier script's build (IB_BIN) or a fresh build.
# Usage (repository root): OUT=dir [IB_BIN=path/to/inferbench] [IB_MODELS=llama-3-70b] bash bench/gpu/seed_top5.sh
# IB_RESUME=path/to/st5.tgz (an earlier call's, committed and so carried): its finished entries
# are kept (the suite resumes a result directory that holds its state) and the leaderboard shows
# them with this call's, so the five rows at three runs each can take several calls.
# Writes leaderboard.md, leaderboard.csv, suite.log and st5.tgz (every entry's result.json).
# IB_SUITE=bench/seed-table.yaml: another suite file the same way (its archive named after it:
# seed-table.tgz, holding seed-table/; IB_RESUME takes such an archive).
# IB_TIMEOUT_S (500) limits the suite (SIGINT: it keeps every finished entry); it is cut to what
# the device call has left (IB_CALL_LIMIT_S, 600, counted from IB_T0 or this script's start) less
# 30 s for the archive, so a slow build cannot push the suite past the call's end.
set -u; T0=${IB_T0:-$(date +%s)}; el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
BIN=${IB_BIN:-}
# An earlier call's binary (the machine still warm), or a fresh build when it is gone.
[ -n "$BIN" ] && [ ! -x "$BIN" ] && { echo "$BIN is gone: building"; BIN=; }
if [ -z "$BIN" ]; then
  BUILD=build/h200 &&
    build_inferbench "$O/build.log" || { tail -20 "$O/build.log"; exit 1; }
  BIN=$BUILD/bin/inferbench
fi
SUITE=${IB_SUITE:-bench/seed-top5.yaml}; N=$(basename "$SUITE" .yaml)
[ "$N" = seed-top5 ] && N=st5
S=$O/$N; ONLY=()
if [ -n "${IB_RESUME:-}" ]; then tar xzf "$IB_RESUME" -C "$O" && echo "resuming $(ls "$S" | tr '\n' ' ')"; fi
[ -n "${IB_MODELS:-}" ] && ONLY=(--model-list "$IB_MODELS")
LIMIT=${IB_TIMEOUT_S:-500}
LEFT=$(( ${IB_CALL_LIMIT_S:-600} - ($(date +%s) - T0) - 30 ))
(( LEFT < LIMIT )) && { echo "suite limit ${LIMIT} s cut to ${LEFT} s (the call's time left)"; LIMIT=$LEFT; }
(( LIMIT < 1 )) && LIMIT=1
timeout -s INT "$LIMIT" "$BIN" suite "$SUITE" --result-dir "$S" \
  --override "runs=${IB_RUNS:-1}" "${ONLY[@]}" > "$O/suite.log" 2>&1
echo "suite rc=$? $(el)"
# The leaderboard of every entry finished with these flags (this call's and IB_RESUME's).
"$BIN" suite "$SUITE" --result-dir "$S" --report-only --override "runs=${IB_RUNS:-1}" \
  >> "$O/suite.log" 2>&1
cp "$S/leaderboard.md" "$S/leaderboard.csv" "$O/" 2>/dev/null
grep -E "^\| [0-9]" "$O/leaderboard.md" 2>/dev/null
find "$S" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/$N.tgz" -C "$O" "$N" && rm -rf "$S"
echo "done $(el)"
