#!/usr/bin/env bash
# local_slurm.sh - a real, small Slurm cluster on this one machine (Debian/Ubuntu, run as root).
#
# Used by srl-hpc's tests and by anyone who wants to try the Slurm path on a laptop. It runs one
# slurmctld and four virtual slurmd nodes (n1..n4, 20000 MB and 2 fake GPUs each by default), with
# partitions `cpu` (default) and `gpu`, both on all nodes. No systemd needed.
#
# By default each node is a host of its own, as on a real cluster (SRL_SLURM_HOSTS=namespaces):
#   - its own network namespace with two interfaces: eth0 on a management network ($NET.0.0/24, where
#     slurmctld listens at $NET.0.1 and Slurm reaches the nodes) and ib0 on a second, "fast" network
#     ($NET.1.0/24), each a bridge in this machine's namespace; traffic stays among these addresses;
#   - its own hostname (nK: a UTS namespace), which resolves as on Debian to 127.0.1.1, a loopback
#     address (its own /etc/hosts; the other nodes' names resolve to their eth0 addresses, nK-ib to
#     their ib0 addresses; no name server answers there);
#   - its own /tmp and /dev/shm (a mount namespace); everything else, /var/tmp and the repository
#     included, is the "shared filesystem";
#   - CPU binding on (TaskPlugin=task/affinity): each node declares this machine's CPUs, so a task
#     asking for -c 1 is pinned to one of them. The nodes share the machine's cores.
# SRL_SLURM_HOSTS=shared runs every node on this machine's own network (127.0.0.1), filesystem and
# hostname instead, with 160 CPUs per node and no binding (benchmarks/scale.py's hundreds of workers).
#
# Usage:
#   bash scripts/local_slurm.sh install   # apt-get install slurm-wlm munge openmpi (skipped if present)
#   bash scripts/local_slurm.sh start     # write config, start munged/slurmctld/slurmd x4, wait for idle
#   bash scripts/local_slurm.sh status    # daemons up? + sinfo; exit 0 if all up, 3 otherwise
#   bash scripts/local_slurm.sh stop      # stop the daemons this script started (and their job steps)
#   eval "$(bash scripts/local_slurm.sh env)"  # export SLURM_CONF when a non-default path is used
#
# Then e.g.:  sbatch --wrap hostname;  srun -N2 -n2 --mpi=pmix python3 -c 'print(1)';
#             srun --gres=gpu:2 -p gpu env | grep CUDA_VISIBLE_DEVICES   (-> 0,1)
#
# Environment:
#   SRL_SLURM_HOSTS  namespaces (default) or shared: above
#   SRL_SLURM_NET   the first two octets of the nodes' private networks (default 10.250: eth0 addresses
#                   10.250.0.11-14, ib0 10.250.1.11-14)
#   SRL_SLURM_SELF  what a node's own hostname resolves to: loopback (127.0.1.1, Debian's default) or eth0
#   SRL_SLURM_SHARED  paths under /tmp the nodes still see (colon-separated; this repository always)
#   SRL_SLURM_DIR   state, logs, spool, pid files          (default /var/tmp/srl-local-slurm: the nodes
#                   see it, so it is not under their private /tmp)
#   SLURM_CONF      where slurm.conf is written             (default /etc/slurm/slurm.conf, the path
#                   Debian's Slurm reads without SLURM_CONF; gres.conf and mpi.conf go next to it)
#   SRL_SLURM_WAIT  seconds `start` waits for all nodes idle (default 30)
#   SRL_SLURM_FORCE=1  overwrite a slurm.conf that this script did not write
#   SRL_SLURM_CPUS  CPUs each virtual node declares (default: this machine's with namespaces, binding on;
#                   160 with shared, far more than the machine has, so that hundreds of workers share its
#                   cores, e.g. benchmarks/scale.py's 256 actors; more than the machine has turns binding off)
#   SRL_SLURM_MEM_MB  memory each virtual node declares (default 20000; not enforced)
#   SRL_SLURMD_TIMEOUT  seconds a slurmd may go unanswered before its node is set DOWN and its jobs are
#                   requeued (default 45, so that requeued jobs restart fast; hundreds of workers on a
#                   few cores can delay the daemons' answers past it: benchmarks/scale.py's docs say when)
#                   (all three take effect at `start`; stop first to change a running cluster)
#
# Notes: no accounting daemon, so `sacct` does not work; use squeue/scontrol (finished jobs stay
# visible for an hour, MinJobAge). As root, `mpirun` inside a job needs --allow-run-as-root.
set -euo pipefail

DIR=${SRL_SLURM_DIR:-/var/tmp/srl-local-slurm}
HOSTS=${SRL_SLURM_HOSTS:-namespaces}
[[ $HOSTS == namespaces || $HOSTS == shared ]] || { echo "local_slurm: SRL_SLURM_HOSTS must be namespaces or shared, not '$HOSTS'" >&2; exit 2; }
[[ $HOSTS == shared || $DIR != /tmp/* ]] || { echo "local_slurm: SRL_SLURM_DIR ($DIR) must not be under /tmp: the nodes have a /tmp of their own" >&2; exit 2; }
NET=${SRL_SLURM_NET:-10.250}
SELF=${SRL_SLURM_SELF:-loopback}
MACHINE_CPUS=$(nproc)
DEFAULT_CONF=/etc/slurm/slurm.conf
CONF=${SLURM_CONF:-$DEFAULT_CONF}
export SLURM_CONF=$CONF
GRES_CONF=$(dirname "$CONF")/gres.conf
MPI_CONF=$(dirname "$CONF")/mpi.conf
WAIT_S=${SRL_SLURM_WAIT:-30}
if [[ $HOSTS == namespaces ]]; then NODE_CPUS=${SRL_SLURM_CPUS:-$MACHINE_CPUS}; else NODE_CPUS=${SRL_SLURM_CPUS:-160}; fi
# Binding pins tasks to CPU numbers of the node: only meaningful where those CPUs exist.
if ((NODE_CPUS <= MACHINE_CPUS)); then TASK_PLUGIN=task/affinity; else TASK_PLUGIN=task/none; fi
NODE_MEM_MB=${SRL_SLURM_MEM_MB:-20000}
SLURMD_TIMEOUT=${SRL_SLURMD_TIMEOUT:-45}
NODES=(n1 n2 n3 n4)  # a het job needs a node per group: trainer, policy, buffer, actor
PIDS=$DIR/pids
MARKER="# Written by srl-hpc scripts/local_slurm.sh"
PACKAGES=(slurm-wlm munge openmpi-bin libopenmpi-dev iproute2)  # iproute2: the nodes' namespaces
MUNGE_KEY=/etc/munge/munge.key

log() { echo "local_slurm: $*" >&2; }
die() { log "error: $*"; exit 1; }
need_root() { [[ $(id -u) == 0 ]] || die "must run as root"; }

# ---------------------------------------------------------------- install
cmd_install() {
  need_root
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then log "packages already installed"; return 0; fi
  export DEBIAN_FRONTEND=noninteractive
  # Update the package lists only when install fails without it (e.g. empty lists in a container).
  if ! apt-get install -y "${missing[@]}"; then
    apt-get update
    apt-get install -y "${missing[@]}"
  fi
}

# ---------------------------------------------------------------- process helpers
# Alive = exists, is not a zombie (PID 1 here may not reap), and has the expected command name
# (guards against pid reuse after a reboot or a long time).
pid_alive() {
  local pid=$1 name=$2 stat
  [[ -n $pid && -r /proc/$pid/stat ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ ${stat#*) } != Z* ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name"* ]]
}

# daemon_alive KEY NAME: is the daemon whose pid we saved under KEY still running?
daemon_alive() { [[ -f $PIDS/$1 ]] && pid_alive "$(cat "$PIDS/$1")" "$2"; }

# start_bg KEY NAME CMD...: run CMD in the background in its own session (so a terminal hangup or
# Ctrl-C does not reach it), save its pid under KEY. setsid execs in place here (we are not a
# process-group leader), so $! is the daemon itself; checked below.
start_bg() {
  local key=$1 name=$2; shift 2
  setsid "$@" >>"$DIR/log/$key.out" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDS/$key"
  local i  # (a namespaced slurmd execs through nsenter, unshare and sh first)
  for i in $(seq 1 20); do sleep 0.1; pid_alive "$pid" "$name" && return 0; done
  tail -n 20 "$DIR/log/$key.out" >&2 || true; die "$key did not start"
}

# stop_pids NAME:PID...: SIGTERM, wait up to 10 s, then SIGKILL and wait again.
stop_pids() {
  local item i
  for item in "$@"; do kill -TERM "${item#*:}" 2>/dev/null || true; done
  for i in $(seq 1 100); do
    local left=0
    for item in "$@"; do pid_alive "${item#*:}" "${item%%:*}" && left=1; done
    ((left)) || return 0
    ((i == 50)) && for item in "$@"; do kill -KILL "${item#*:}" 2>/dev/null || true; done
    sleep 0.2
  done
  log "warning: some processes did not exit: $*"
}

# Every descendant of the given pids, from one `ps` snapshot, one per line.
descendants() {
  ps -eo pid=,ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
    { parent[$1] = $2 }
    END { do { more = 0; for (p in parent) if (!(p in want) && (parent[p] in want)) { want[p] = 1; print p; more = 1 } } while (more) }'
}

# slurmstepd processes spawned by our slurmd's. They are double-forked (ppid 1) and overwrite their
# environment for the process title, so they are found by the slurmd log file of ours they keep open.
our_stepds() {
  local p
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
    find "$p/fd" -maxdepth 1 -lname "$DIR/log/*" 2>/dev/null | grep -q . && echo "${p#/proc/}"
  done
  return 0
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# ---------------------------------------------------------------- hosts (SRL_SLURM_HOSTS=namespaces)
# node_addr K eth0|ib0: node nK's address on that network (127.0.0.1 with shared hosts)
node_addr() {
  [[ $HOSTS == namespaces ]] || { echo 127.0.0.1; return; }
  if [[ $2 == eth0 ]]; then echo "$NET.0.$((10 + $1))"; else echo "$NET.1.$((10 + $1))"; fi
}
ctld_addr() { if [[ $HOSTS == namespaces ]]; then echo "$NET.0.1"; else echo 127.0.0.1; fi; }
BRIDGES=(srl-eth srl-ib)  # the management and the fast network, in this machine's namespace

# Bridges, and per node a network namespace srl-nK with eth0 and ib0 (veth pairs onto the bridges) and
# the hosts file its mount namespace will see as /etc/hosts. Idempotent: what exists is kept.
net_up() {
  local b i k=0 n ns
  for i in 0 1; do
    b=${BRIDGES[$i]}
    ip link show "$b" >/dev/null 2>&1 || { ip link add "$b" type bridge; ip addr add "$NET.$i.1/24" dev "$b"; }
    ip link set "$b" up
  done
  mkdir -p "$DIR/hosts"
  for n in "${NODES[@]}"; do
    k=$((k + 1)); ns=srl-$n
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      for i in 0 1; do
        local dev=(eth0 ib0); local host_end=srl-$n-${dev[$i]:0:1}
        ip link add "$host_end" type veth peer name "${dev[$i]}" netns "$ns"
        ip link set "$host_end" master "${BRIDGES[$i]}" up
        ip -n "$ns" addr add "$(node_addr $k "${dev[$i]}")/24" dev "${dev[$i]}"
        ip -n "$ns" link set "${dev[$i]}" up
      done
      ip -n "$ns" route add default via "$(ctld_addr)"
    fi
    write_hosts "$n" "$k" >"$DIR/hosts/$n"
  done
  # No name server is reachable from the nodes' networks: lookups of unknown names fail at once (no
  # nameserver line: the resolver tries this node's own port 53, which refuses), not after a timeout.
  : >"$DIR/hosts/resolv.conf"
}

# /etc/hosts of node nK: its own name as SRL_SLURM_SELF says, the others' on the management network.
write_hosts() {
  local me=$1 k=$2 j=0 other
  echo "127.0.0.1 localhost"
  if [[ $SELF == eth0 ]]; then echo "$(node_addr "$k" eth0) $me"; else echo "127.0.1.1 $me"; fi
  echo "$(ctld_addr) $(hostname -s)"
  for other in "${NODES[@]}"; do
    j=$((j + 1))
    [[ $other == "$me" ]] || echo "$(node_addr $j eth0) $other"
    echo "$(node_addr $j ib0) $other-ib"  # as clusters name their fast interfaces, for reverse lookups
  done
}

net_down() {
  local n b
  for n in "${NODES[@]}"; do ip netns del "srl-$n" 2>/dev/null || true; done  # takes its veths along
  for b in "${BRIDGES[@]}"; do ip link del "$b" 2>/dev/null || true; done
}

# The command that runs slurmd for node $1: with namespaces, inside the node's network namespace and new
# UTS and mount namespaces where it sets its hostname, /tmp, /dev/shm and /etc/hosts. `nsenter --net`,
# not `ip netns exec`, which remounts /sys and leaves slurmd without /sys/fs/cgroup.
slurmd_command() {
  local n=$1
  if [[ $HOSTS != namespaces ]]; then echo slurmd -D -N "$n"; return; fi
  echo nsenter --net=/var/run/netns/srl-$n unshare --mount --uts --propagation private -- sh -c \
    "'hostname $n && $(private_tmp_mounts) && mount -t tmpfs tmpfs /dev/shm && mount --bind $DIR/hosts/$n /etc/hosts && mount --bind $DIR/hosts/resolv.conf /etc/resolv.conf && exec slurmd -D -N $n'"
}

# A node's own /tmp: a tmpfs, through which the paths of SHARED that lie under this machine's /tmp (this
# repository, with its virtualenv, when it was cloned there) still show, as a cluster's shared filesystem.
SHARED=$(cd "$(dirname "$0")/.." && pwd)${SRL_SLURM_SHARED:+:$SRL_SLURM_SHARED}
private_tmp_mounts() {
  local mounts="mkdir -p $DIR/host-tmp && mount --bind /tmp $DIR/host-tmp && mount -t tmpfs tmpfs /tmp" path
  local IFS=:
  for path in $SHARED; do
    [[ $path == /tmp/* ]] || continue
    mounts+=" && mkdir -p $path && mount --bind $DIR/host-tmp/${path#/tmp/} $path"
  done
  echo "$mounts"
}

# ---------------------------------------------------------------- config
write_config() {
  if [[ -f $CONF ]] && ! head -n 1 "$CONF" | grep -qF "$MARKER" && [[ ${SRL_SLURM_FORCE:-} != 1 ]]; then
    die "$CONF exists and was not written by this script; set SLURM_CONF=<other path> or SRL_SLURM_FORCE=1"
  fi
  mkdir -p "$(dirname "$CONF")"
  local n k
  {
    echo "$MARKER; rewritten on every start. State: $DIR"
    cat <<EOF
ClusterName=srl-local
# The (addr) form makes slurmctld accept this host without a resolvable hostname.
SlurmctldHost=$(hostname -s)($(ctld_addr))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
# %n = node name: each virtual node needs its own spool, pid file, log and TmpFS. A shared TmpFS
# makes multi-node pmix steps fail ("spmix_appdir ... File exists").
SlurmdSpoolDir=$DIR/spool/%n
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
TmpFS=$DIR/tmp/%n
# Let the virtual nodes declare more CPUs than the machine has.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
# task/affinity: a task is pinned to the CPUs it was given (-c), as on most clusters
TaskPlugin=$TASK_PLUGIN
MpiDefault=pmix
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Defaults delay every sbatch by up to 3 s, hetjobs (started only by backfill) by up to 30 s, and a
# main scheduling pass by up to 60 s.
# Never add a word containing "defer" here: it stops srun from being placed at submit time.
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2
SelectType=select/cons_tres
# Memory is a consumable resource so --mem is honoured; without DefMemPerCPU a job that does not
# ask for memory would get a whole node's memory and block every other job there.
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=400
# Keep finished jobs visible to scontrol show job / squeue --states=all for an hour.
MinJobAge=3600
# Fast scancel: SIGKILL 5 s after SIGTERM.
KillWait=5
# A requeued job is held until its old job credential expires (cred_expire, default 120 s), and a
# hetjob then starts only when backfill sees a change: nodes answer a ping every SlurmdTimeout/3.
# With these a requeued job runs again 15-35 s after it left, not 2-3 minutes.
AuthInfo=cred_expire=15
SlurmdTimeout=$SLURMD_TIMEOUT
InactiveLimit=0
# A node that was down (e.g. after stop/start) comes back as soon as its slurmd registers.
ReturnToService=2
GresTypes=gpu
EOF
    k=0
    for n in "${NODES[@]}"; do
      k=$((k + 1))
      echo "NodeName=$n NodeAddr=$(node_addr $k eth0) NodeHostname=$n Port=$((6818 + k)) CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB Gres=gpu:2 State=UNKNOWN"
    done
    local all; all=$(IFS=,; echo "${NODES[*]}")
    echo "PartitionName=cpu Nodes=$all Default=YES MaxTime=UNLIMITED State=UP"
    echo "PartitionName=gpu Nodes=$all MaxTime=UNLIMITED State=UP"
  } >"$CONF"
  {
    echo "$MARKER"
    # Fake GPUs: Slurm only stat()s the files. Count= without File= leaves the node INVAL, and
    # File=/dev/null with a count is fatal, so each GPU gets its own character-device file.
    echo "AutoDetect=off"
    for n in "${NODES[@]}"; do echo "NodeName=$n Name=gpu File=$DIR/fakegpu/$n-[0-1]"; done
  } >"$GRES_CONF"
  {
    echo "$MARKER"
    # Hundreds of tasks sharing two cores reach MPI start-up minutes apart: the PMIx fence's default
    # 300 s timed out with 256 actors that each import torch (the impala placement's scale run).
    echo "PMIxTimeout=1800"
    # The step daemons of a het job's components reach each other through slurmd's messages, which retry,
    # not by direct TCP connections, which do not: with the nodes as hosts of their own, a daemon still
    # starting its node's 64 tasks refused one now and then ("Cannot establish direct connection to n2")
    # and the whole step was cancelled before any worker ran.
    echo "PMIxDirectConn=false"
  } >"$MPI_CONF"
}

make_dirs() {
  local n i
  mkdir -p "$DIR"/{state,run,log,fakegpu} "$PIDS"
  for n in "${NODES[@]}"; do
    mkdir -p "$DIR/spool/$n" "$DIR/tmp/$n"
    for i in 0 1; do [[ -e $DIR/fakegpu/$n-$i ]] || mknod "$DIR/fakegpu/$n-$i" c 1 3; done
  done
}

# ---------------------------------------------------------------- start
start_munge() {
  if daemon_alive munged munged || munge_works; then return 0; fi
  if [[ ! -f $MUNGE_KEY ]]; then
    log "creating $MUNGE_KEY"
    mkdir -p "$(dirname "$MUNGE_KEY")"
    (umask 077; dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none)
  fi
  chown munge:munge "$MUNGE_KEY"; chmod 0400 "$MUNGE_KEY"
  mkdir -p /run/munge; chown munge:munge /run/munge; chmod 0755 /run/munge
  # munged refuses to run as root ("Keyfile is insecure"); setpriv execs in place, keeping the pid.
  start_bg munged munged setpriv --reuid=munge --regid=munge --init-groups munged -F
  local i
  for i in $(seq 1 50); do munge_works && return 0; sleep 0.1; done
  die "munged started but munge -n | unmunge fails; see $DIR/log/munged.out"
}

all_up() {
  daemon_alive slurmctld slurmctld || return 1
  local n
  for n in "${NODES[@]}"; do daemon_alive "slurmd-$n" slurmd || return 1; done
  munge_works
}

# All nodes registered and usable. Idle is the normal case; mix/alloc happen when jobs that were
# pending before a restart start at once. A trailing "*" (not responding), down, drain, inval fail.
nodes_up() {
  local states
  states=$(sinfo -h -N -p cpu -o '%N %t' 2>/dev/null) || return 1
  [[ $(grep -cE ' (idle|mix|alloc)$' <<<"$states") == "${#NODES[@]}" ]]
}

wait_nodes_up() {
  local deadline=$((SECONDS + WAIT_S)) f
  until nodes_up; do
    if ((SECONDS >= deadline)); then
      log "nodes not up after ${WAIT_S}s (SRL_SLURM_WAIT)"
      { sinfo -N; sinfo -R; } >&2 2>&1 || true
      for f in "$DIR"/log/*; do echo "== $f"; tail -n 15 "$f"; done >&2
      exit 1
    fi
    sleep 0.2
  done
}

# slurmctld recovers jobs from its saved state, but `stop` killed every job step, so jobs it still
# believes are running would hold their nodes forever (the virtual nodes never "reboot", so Slurm
# does not notice). Cancel them; pending jobs are kept and will run.
cancel_stale_jobs() {
  [[ -z $(our_stepds) ]] || return 0
  local jobs
  jobs=$(squeue -h -t RUNNING,SUSPENDED -o '%i' 2>/dev/null) || return 0
  [[ -n $jobs ]] || return 0
  log "cancelling jobs left running by the last stop: $(echo $jobs)"
  scancel $jobs 2>/dev/null || true
}

cmd_start() {
  need_root
  command -v slurmctld >/dev/null || die "Slurm is not installed; run: $0 install"
  if all_up && sinfo >/dev/null 2>&1; then log "already running (state in $DIR)"; return 0; fi
  make_dirs
  [[ $HOSTS == namespaces ]] && net_up
  write_config
  start_munge
  local fresh=0 n
  daemon_alive slurmctld slurmctld || { fresh=1; start_bg slurmctld slurmctld slurmctld -D; }
  for n in "${NODES[@]}"; do
    daemon_alive "slurmd-$n" slurmd || eval start_bg "slurmd-$n" slurmd "$(slurmd_command "$n")"
  done
  wait_nodes_up
  ((fresh)) && cancel_stale_jobs
  log "running: $(sinfo -h -o '%P %D %t' | tr '\n' ' ')(hosts: $HOSTS, $TASK_PLUGIN, config $CONF, state $DIR)"
}

# ---------------------------------------------------------------- stop
cmd_stop() {
  need_root
  local procs=() n key
  for n in "${NODES[@]}"; do
    daemon_alive "slurmd-$n" slurmd && procs+=("slurmd:$(cat "$PIDS/slurmd-$n")")
  done
  ((${#procs[@]})) && stop_pids "${procs[@]}"
  # Job steps outlive slurmd: kill each of our slurmstepd's with its whole process tree.
  local stepds
  stepds=$(our_stepds)
  [[ -z $stepds ]] || kill -KILL $stepds $(descendants $stepds) 2>/dev/null || true
  daemon_alive slurmctld slurmctld && stop_pids "slurmctld:$(cat "$PIDS/slurmctld")"
  # munged only if this script started it (pid file exists only then).
  daemon_alive munged munged && stop_pids "munged:$(cat "$PIDS/munged")"
  for key in slurmctld munged "${NODES[@]/#/slurmd-}"; do rm -f "$PIDS/$key"; done
  net_down
  log "stopped"
}

# ---------------------------------------------------------------- status / env
cmd_status() {
  local ok=0 n
  check() { if daemon_alive "$1" "$2"; then echo "$1: up (pid $(cat "$PIDS/$1"))"; else echo "$1: down"; ok=3; fi; }
  if munge_works; then echo "munge: up"; else echo "munge: down"; ok=3; fi
  check slurmctld slurmctld
  for n in "${NODES[@]}"; do check "slurmd-$n" slurmd; done
  sinfo 2>&1 || ok=3
  return $ok
}

cmd_env() {
  if [[ $CONF != "$DEFAULT_CONF" ]]; then printf 'export SLURM_CONF=%q\n' "$CONF"; fi
}

case ${1:-} in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
