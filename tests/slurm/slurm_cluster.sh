#!/bin/bash
# A private Slurm cluster on this one host for ddprun's tests: munged with its own key and
# socket, one slurmctld and two slurmd (`slurmd -N n1`, `slurmd -N n2`), everything (config,
# state, spool, logs, pid files) under DIR, ports chosen free at start.
#
#   slurm_cluster.sh start DIR   prints SLURM_CONF=DIR/slurm.conf once both nodes are idle
#   slurm_cluster.sh stop DIR    cancels every job, stops the daemons and any slurmstepd they
#                                left (only processes holding files under DIR), idempotent
#
# Needs root (slurmd runs tasks as the submitting user and must be able to), Debian's slurm-wlm
# and munge, and the names n1 and n2 resolving to this host: `start` appends
# "127.0.0.1 n1 n2" to /etc/hosts when they do not resolve. Exit 77 (skip) with a reason on
# stderr when any of that is missing; 1 when the cluster does not come up (logs printed).
set -u

cmd=${1:-}
dir=${2:-}
if [[ -z "$cmd" || -z "$dir" ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
dir=$(realpath -m "$dir")
export SLURM_CONF="$dir/slurm.conf"
nodes=(n1 n2)

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# Waits up to $1 seconds for the command in the other arguments to succeed.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2  # polling the daemons; they offer nothing to block on
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# Stops the daemons whose pid files are given: SIGTERM to all at once (slurmd takes about 2 s
# to shut down), SIGKILL to any still there after 10 s.
stop_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    pid=$(cat "$f" 2>/dev/null)
    if pid_alive "$pid"; then
      kill -TERM "$pid" 2>/dev/null
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null
  done
  rm -f "$@"
}

# Processes with a file descriptor or working directory under $dir (slurmstepd, tasks).
procs_using_dir() {
  local p
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" == "$$" ]] && continue
    if [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$dir"* ]] ||
      ls -l "$p/fd" 2>/dev/null | grep -q -- "-> $dir/"; then
      echo "${p#/proc/}"
    fi
  done
}

all_idle() {
  local states
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u)
  [[ "$states" == $'n1 idle\nn2 idle' ]]
}

start() {
  [[ $(id -u) == 0 ]] || skip "the Slurm tests need root (slurmd, munged); running as $(id -un)"
  local bin
  for bin in munged slurmctld slurmd srun sbatch sinfo scontrol scancel squeue; do
    command -v "$bin" >/dev/null || skip "$bin not installed (Debian: apt-get install slurm-wlm munge)"
  done
  local n
  for n in "${nodes[@]}"; do
    if ! getent hosts "$n" >/dev/null; then
      echo "127.0.0.1 $n  # added by ddprun tests/slurm/slurm_cluster.sh" >>/etc/hosts ||
        skip "cannot add $n to /etc/hosts"
    fi
  done
  mkdir -p "$dir"/{munge,state,spool,log} || exit 1
  chmod 700 "$dir/munge"

  # munged: its own key and socket, so it neither needs nor disturbs a system munge.
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" 2>>"$dir/log/munged.log" || {
    cat "$dir/log/munged.log" >&2
    exit 1
  }

  local ctld_port node_ports=()
  ctld_port=$(free_port)
  for n in "${nodes[@]}"; do node_ports+=("$(free_port)"); done
  local host
  host=$(hostname)
  cat >"$SLURM_CONF" <<CONF
# Written by ddprun's tests/slurm/slurm_cluster.sh; removed with its folder.
ClusterName=ddprun-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# Run the scheduler every second, not every 60 s: a job whose begin time passes (a released
# requeue) starts at once.
SchedulerParameters=sched_interval=1
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Trust the CPU counts below rather than this small host's.
SlurmdParameters=config_overrides
ReturnToService=2
# Short so that tests see state changes quickly; KillWait is Slurm's default (30 s).
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=30
JobRequeue=1
# Job ids (and so ddprun's derived ports) differ between clusters that tests run side by side.
FirstJobId=$((1000 + RANDOM * 8))
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${node_ports[0]} CPUs=4 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=${node_ports[1]} CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF

  slurmctld -i 2>>"$dir/log/slurmctld.log" || {
    cat "$dir/log/slurmctld.log" >&2
    exit 1
  }
  for n in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$n"
    slurmd -N "$n" 2>>"$dir/log/slurmd-$n.log" || {
      cat "$dir/log/slurmd-$n.log" >&2
      exit 1
    }
  done
  if ! wait_for 60 all_idle; then
    echo "slurm_cluster.sh: nodes not idle after 60 s:" >&2
    sinfo -N >&2
    tail -n 30 "$dir"/log/*.log >&2
    exit 1
  fi
  echo "SLURM_CONF=$SLURM_CONF"
}

stop() {
  [[ -d "$dir" ]] || return 0
  if [[ -f "$SLURM_CONF" ]] && [[ -f "$dir/slurmctld.pid" ]]; then
    scancel --quiet --full --user=root 2>/dev/null
    wait_for 30 bash -c '[[ -z "$(squeue -h -t R,CG,PD 2>/dev/null)" ]]'
  fi
  local n pidfiles=("$dir/slurmctld.pid")
  for n in "${nodes[@]}"; do pidfiles+=("$dir/slurmd-$n.pid"); done
  stop_pidfiles "${pidfiles[@]}"
  stop_pidfiles "$dir/munge/munged.pid"  # last: the others talk to it while stopping
  local pids
  pids=$(procs_using_dir)
  if [[ -n "$pids" ]]; then
    kill -KILL $pids 2>/dev/null
  fi
  return 0
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
