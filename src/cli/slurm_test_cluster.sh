# A private single-node Slurm for the e2e tests that need one (sourced by
# suite_slurm_e2e_test.sh and run_slurm_e2e_test.sh): munged, slurmctld and slurmd from Debian
# (scripts/install-deps installs them), on private ports with a configuration of their own in
# $W, stopped when the test exits. Exits 77 (skipped) without the daemons or without root (they
# run as root here). Sets W (the test's own directory, removed at exit unless IB_KEEP is set),
# defines fail MESSAGE (prints the daemons' logs, exits 1) and exports SLURM_CONF.
for b in munged slurmctld slurmd sbatch srun squeue scontrol; do
  command -v "$b" >/dev/null || { echo "SKIP: $b is missing (scripts/install-deps installs Slurm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: the test's Slurm daemons run as root"; exit 77; }
W=$(mktemp -d /tmp/ib-slurm-e2e.XXXXXX)

slurm_cluster_stop() {
  [ -n "${IB_KEEP:-}" ] && return 0
  [ -f "$W/slurmd.pid" ] && kill "$(cat "$W/slurmd.pid")" 2>/dev/null || true
  [ -f "$W/slurmctld.pid" ] && kill "$(cat "$W/slurmctld.pid")" 2>/dev/null || true
  munged -s --socket="$W/munge/sock" >/dev/null 2>&1 || true
  sleep 1
  rm -rf "$W"
}
trap slurm_cluster_stop EXIT
fail() { echo "FAIL: $*"; for f in "$W"/log/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

mkdir -p "$W/munge" "$W/state" "$W/spool" "$W/log"
chmod 700 "$W/munge"
head -c 1024 /dev/urandom > "$W/munge/munge.key"
chmod 400 "$W/munge/munge.key"
munged -f --key-file="$W/munge/munge.key" --socket="$W/munge/sock" --pid-file="$W/munge/pid" \
  --log-file="$W/log/munged.log" --seed-file="$W/munge/seed"
# Two free ports below Linux's ephemeral range (32768 on), where a random pick once met a port
# another process's connection held ("Unable to bind listen port ... Address already in use").
SLURM_PORT=$(python3 - <<'PY'
import random, socket
for _ in range(500):
    port = random.randrange(20000, 32700)
    free = True
    for p in (port, port + 1):
        with socket.socket() as s:
            try:
                s.bind(("", p))
            except OSError:
                free = False
    if free:
        print(port)
        break
PY
)
[ -n "$SLURM_PORT" ] || fail "no two free ports between 20000 and 32700 for the test's Slurm"
SLURM_HOST=$(hostname)
cat > "$W/slurm.conf" <<EOF
ClusterName=ibe2e
SlurmctldHost=$SLURM_HOST(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$W/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$SLURM_PORT
SlurmdPort=$(( SLURM_PORT + 1 ))
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$SLURM_HOST NodeAddr=127.0.0.1 NodeHostname=$SLURM_HOST CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$SLURM_HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$W/slurm.conf
slurmctld -c -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && break; sleep 1; done
sinfo -h -o %T | grep -qE '^(idle|mixed)' || fail "the Slurm node never became idle"
