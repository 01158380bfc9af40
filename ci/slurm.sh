#!/usr/bin/env bash
# A real Slurm 22.05 (Debian 12's packages) on this one machine, with emulated compute nodes (issue 25).
#
#   bash ci/slurm.sh up       install (apt) if missing, write the configuration, start munge, slurmctld and the
#                             nodes, wait until every node is idle. Idempotent: what already runs is kept.
#   bash ci/slurm.sh down     stop the nodes and slurmctld this script started (munge too, if it started it)
#   bash ci/slurm.sh status   what runs, sinfo
#   bash ci/slurm.sh env      the line to eval to use this Slurm: export SLURM_CONF=...
#
# Use it:   bash ci/slurm.sh up && export SLURM_CONF=/var/tmp/ckptio-slurm/etc/slurm.conf && sinfo
#
# Environment: CKPTIO_SLURM_DIR (default /var/tmp/ckptio-slurm; every file of this Slurm lives there),
# CKPTIO_SLURM_NODES (default 2), CKPTIO_SLURM_CPUS (CPUs each node claims, default 8), CKPTIO_SLURM_PORT
# (slurmctld's port, default 7410; node i listens on PORT+i. Outside 6800-7300, where Ceph daemons listen).
#
# The emulation: Debian's Slurm is built with MULTIPLE_SLURMD, so several `slurmd -N nX` (each with its own Port=)
# register as separate nodes. Each runs inside `unshare --uts --ipc --mount --propagation private` with the
# hostname set to the node name, a private tmpfs on /dev/shm and DIR/nodes/nX bind-mounted onto DIR/nodelocal
# (the same emulation as tests/multinode.py), and jobs and steps inherit that: MPI_Get_processor_name() is the node
# name, COMM_TYPE_SHARED splits per node, and DIR/nodelocal is each node's own directory (as a node's SSD).
# mpi.conf puts PMIx's client directory there (under the shared /tmp, the emulated nodes' directories collide).
#
# Measured on the 2-core reference machine: see docs/guide/batch.md ("Bring-up").
set -euo pipefail

DIR="${CKPTIO_SLURM_DIR:-/var/tmp/ckptio-slurm}"
NODES="${CKPTIO_SLURM_NODES:-2}"
CPUS="${CKPTIO_SLURM_CPUS:-8}"
PORT="${CKPTIO_SLURM_PORT:-7410}"
CONF="$DIR/etc/slurm.conf"
export SLURM_CONF="$CONF"

log() { echo "ci/slurm.sh: $*" >&2; }
die() { log "$*"; exit 1; }

nodes() { local i; for ((i = 1; i <= NODES; i++)); do echo "n$i"; done; }

alive() {  # alive PIDFILE: the process of that pid file runs
  [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
  local missing=() cmd pkg
  for pair in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client munged:munge; do
    cmd="${pair%%:*}" pkg="${pair#*:}"
    command -v "$cmd" >/dev/null 2>&1 || [[ -x "/usr/sbin/$cmd" ]] || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing ${missing[*]} (apt)"
  local t=$SECONDS
  # the packages' init scripts would start daemons with /etc/slurm/slurm.conf: there is none, they fail harmlessly
  DEBIAN_FRONTEND=noninteractive flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 install -y -q --no-install-recommends \
    "${missing[@]}" >"$DIR/log/apt.log" 2>&1 || { tail -20 "$DIR/log/apt.log" >&2; die "apt-get install failed"; }
  log "apt-get install took $((SECONDS - t)) s"
}

write_config() {
  mkdir -p "$DIR/etc" "$DIR/state" "$DIR/log" "$DIR/run" "$DIR/nodelocal"
  local n i=0 lines=""
  for n in $(nodes); do
    i=$((i + 1))
    mkdir -p "$DIR/nodes/$n/spool" "$DIR/nodes/$n/pmix"
    lines+="NodeName=$n NodeHostname=$n NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=$CPUS RealMemory=2000 State=UNKNOWN"$'\n'
  done
  local nodelist
  nodelist="$(nodes | paste -sd, -)"
  cat >"$CONF.new" <<EOF
# written by ci/slurm.sh (ckptio): a single-machine Slurm with $NODES emulated nodes
ClusterName=ckptio
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# requeued jobs start again ~10-20 s after the requeue instead of ~121 s (the job credential's lifetime)
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/nodes/%n/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# one line per finished job run (requeued runs included): the job's trail, as sacct would show it
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
SchedulerType=sched/builtin
# the main scheduling pass every 2 s instead of 60: a requeued job starts as soon as its BeginTime has passed
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
# at the time limit: SIGCONT+SIGTERM, SIGKILL KillWait s later; no grace beyond the limit
KillWait=5
OverTimeLimit=0
MinJobAge=600
MessageTimeout=20
InactiveLimit=0
$lines
PartitionName=debug Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  # PMIx client directory on the node-local path (each node's own DIR/nodes/nX/pmix): under the shared /tmp the
  # emulated nodes collide (pmixp_mkdir ... File exists)
  cat >"$DIR/etc/mpi.conf.new" <<EOF
PMIxCliTmpDirBase=$DIR/nodelocal/pmix
EOF
  local f changed=0
  for f in "$CONF" "$DIR/etc/mpi.conf"; do
    if ! cmp -s "$f.new" "$f" 2>/dev/null; then mv "$f.new" "$f"; changed=1; else rm -f "$f.new"; fi
  done
  echo "$changed"
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi   # a munged of the machine (or of a previous up) serves us too
  [[ -s /etc/munge/munge.key ]] || { log "creating /etc/munge/munge.key"; mungekey --create --force >/dev/null 2>&1 \
    || /usr/sbin/create-munge-key -f >/dev/null; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  mkdir -p /run/munge && chown munge:munge /run/munge
  # a socket without a munged (one killed with SIGKILL, e.g. at the end of a session) makes PMIx retry it for
  # ~2.3 s in every mpirun of the machine: no munged runs (checked above), so it is stale
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged || die "munged does not start (see /var/log/munge/munged.log)"
  touch "$DIR/run/munge.started-by-us"
  local i
  for ((i = 0; i < 50; i++)); do munge -n </dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "munge does not answer"
}

start_ctld() {
  alive "$DIR/run/slurmctld.pid" && return 0
  # -i: ignore the state of a previous run's jobs if their files no longer match (a fresh cluster otherwise)
  /usr/sbin/slurmctld -f "$CONF" -i || die "slurmctld does not start: $(tail -5 "$DIR/log/slurmctld.log")"
  local i
  for ((i = 0; i < 100; i++)); do scontrol ping 2>/dev/null | grep -q UP && return 0; sleep 0.1; done
  die "slurmctld does not answer on port $PORT: $(tail -5 "$DIR/log/slurmctld.log")"
}

start_node() {  # start_node nX: slurmd -N nX in its own UTS/IPC/mount namespace
  local n="$1"
  alive "$DIR/run/slurmd-$n.pid" && return 0
  unshare --uts --ipc --mount --propagation private /bin/sh -c '
    set -e
    hostname "$1"
    mount -t tmpfs -o size=1g tmpfs /dev/shm
    mount --bind "$2/nodes/$1" "$2/nodelocal"
    exec /usr/sbin/slurmd -N "$1" -f "$3"' node "$n" "$DIR" "$CONF" \
    || die "slurmd -N $n does not start: $(tail -5 "$DIR/log/slurmd-$n.log" 2>/dev/null)"
}

wait_idle() {
  local i states
  for ((i = 0; i < 600; i++)); do
    states="$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)"
    if [[ $(grep -c ' idle$' <<<"$states") -eq $NODES ]]; then return 0; fi
    # a node left down/drained by an earlier run (e.g. its slurmd was killed): take it back
    { grep -E ' (down|drain|drng|drained|fail)\*?$' <<<"$states" || true; } | while read -r n _; do
      scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true
    done
    sleep 0.1
  done
  die "nodes not idle after 60 s: $(sinfo -N 2>&1)"
}

up() {
  local t=$SECONDS
  mkdir -p "$DIR/log"
  install_packages
  local changed
  changed="$(write_config)"
  if [[ "$changed" == 1 ]] && alive "$DIR/run/slurmctld.pid"; then
    log "configuration changed: restarting the daemons"
    down_daemons
  fi
  start_munge
  start_ctld
  local n
  for n in $(nodes); do start_node "$n"; done
  wait_idle
  log "up in $((SECONDS - t)) s: $NODES nodes idle; export SLURM_CONF=$CONF"
}

stop_pidfile() {  # stop_pidfile FILE: TERM, then KILL after 5 s
  local f="$1" pid i
  alive "$f" || { rm -f "$f"; return 0; }
  pid="$(cat "$f")"
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || { rm -f "$f"; return 0; }; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

down_daemons() {
  local f
  for f in "$DIR"/run/slurmd-*.pid; do [[ -e "$f" ]] && stop_pidfile "$f"; done
  stop_pidfile "$DIR/run/slurmctld.pid"
}

down() {
  [[ -d "$DIR" ]] || return 0
  # running jobs first, so that no rank outlives its node
  if alive "$DIR/run/slurmctld.pid"; then scancel --user=root --full >/dev/null 2>&1 || true; sleep 1; fi
  down_daemons
  if [[ -e "$DIR/run/munge.started-by-us" ]]; then
    stop_pidfile /run/munge/munged.pid   # the munged this script started (its own pid file), no other
    rm -f "$DIR/run/munge.started-by-us"
  fi
  log "down"
}

status() {
  local f
  alive "$DIR/run/slurmctld.pid" && echo "slurmctld: running (pid $(cat "$DIR/run/slurmctld.pid"), port $PORT)" \
    || echo "slurmctld: not running"
  for f in "$DIR"/run/slurmd-*.pid; do
    [[ -e "$f" ]] || continue
    alive "$f" && echo "$(basename "$f" .pid): running (pid $(cat "$f"))" || echo "$(basename "$f" .pid): dead"
  done
  pgrep -x munged >/dev/null && echo "munged: running" || echo "munged: not running"
  alive "$DIR/run/slurmctld.pid" && sinfo -N
  alive "$DIR/run/slurmctld.pid"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
