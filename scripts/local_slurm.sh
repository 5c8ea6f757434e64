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
#     asking for -c 1 is pinned to one of them. The nodes share the machine's cores;
#   - two hardware threads per core (ThreadsPerCore=2, CPUs counted as threads, as on most x86 clusters:
#     a task gets whole cores, both threads of each);
#   - cgroups (v1; SRL_SLURM_CGROUPS=0 turns them off): proctrack/cgroup and task/cgroup with
#     ConstrainCores, ConstrainRAMSpace (a job is OOM-killed past the memory it asked for, DefMemPerCPU
#     if it did not ask) and ConstrainDevices (a job can open only the fake GPUs it was given);
#   - a soft open-files limit of 1024 in every job, whatever the submitter's (the hard limit stays this
#     machine's): PropagateResourceLimitsExcept=NOFILE, UsePAM=1 and pam_limits (/etc/pam.d/slurm);
# Accounting, in both modes (SRL_SLURM_ACCOUNTING=0 turns it off, as on clusters without it): slurmdbd on a
# MariaDB of the script's own (data and socket under $SRL_SLURM_DIR/mariadb, no network), so sacct works;
# AccountingStorageEnforce=associations,limits,qos, so only registered users can submit:
#   - cluster srl-local, account `rl`, and in it root, the ordinary user srl-user (created by `start`: jobs
#     submitted as it run as it, with its own home), the user who ran sudo, and SRL_SLURM_USERS;
#   - QOS `normal`, everyone's default, with no limits;
#   - QOS `small` (MaxJobsPerUser=2, MaxSubmitJobsPerUser=3) that those users may ask for (--qos=small):
#     a third job pends (QOSMaxJobsPerUserLimit), a fourth submission is refused.
# SRL_SLURM_HOSTS=shared runs every node on this machine's own network (127.0.0.1), filesystem and
# hostname instead, with 160 CPUs per node, no binding, no cgroups, one thread per core and the
# submitter's limits (benchmarks/scale.py's hundreds of workers).
#
# Usage:
#   bash scripts/local_slurm.sh install   # apt-get install slurm-wlm slurmdbd mariadb munge openmpi (skipped if present)
#   bash scripts/local_slurm.sh start     # write config, start munged, mariadbd/slurmdbd (registering the
#                                         # cluster, account, users, QOS), slurmctld, slurmd x4; wait for idle
#   bash scripts/local_slurm.sh status    # daemons up? + sinfo; exit 0 if all up, 3 otherwise
#   bash scripts/local_slurm.sh stop      # stop the daemons this script started (and their job steps)
#   bash scripts/local_slurm.sh hetsteps off|on  # a running cluster without (or again with) het steps:
#                                         # disable_hetero_steps in SchedulerParameters, then scontrol reconfigure
#   bash scripts/local_slurm.sh lose NODE [--down]  # that host is lost: every process in it (its slurmd,
#                                         # job steps, tasks) is SIGKILLed at once; slurmctld marks it DOWN
#                                         # after SlurmdTimeout, or at once with --down (scontrol, as a node
#                                         # health check would); `start` brings it back (a reboot)
#   bash scripts/local_slurm.sh cut NODE  # that host's fast network (ib0) goes down: its processes live on,
#                                         # Slurm still reaches it (eth0), the run's traffic does not
#   bash scripts/local_slurm.sh mend NODE # its ib0 up again
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
#   SRL_SLURM_MEM_MB  memory each virtual node declares (default 20000; with cgroups a job is held to what
#                   it asked for, not to this)
#   SRL_SLURM_ACCOUNTING  1 (default): slurmdbd + MariaDB, sacct, QOS; 0: none (sacct says it is disabled)
#   SRL_SLURM_USERS  more users to register in account rl (space-separated; root and $SUDO_USER always)
#   SRL_SLURM_CGROUPS  1 (default with namespaces): the cgroup plugins above; 0: proctrack/linuxproc and
#                   task/affinity only (the nodes' processes are then not confined)
#   SRL_SLURM_HETSTEPS  1 (default): steps may span a het job's components; 0: they may not
#                   (SchedulerParameters has disable_hetero_steps), as at sites without het steps: srl-launch
#                   then refuses slurm.layout: hetjob and runs slurm.layout: jobs
#   SRL_SLURMD_TIMEOUT  seconds a slurmd may go unanswered before its node is set DOWN and its jobs are
#                   requeued (default 45, so that requeued jobs restart fast; hundreds of workers on a
#                   few cores can delay the daemons' answers past it: benchmarks/scale.py's docs say when)
#                   (all three take effect at `start`; stop first to change a running cluster)
#
# Notes: finished jobs stay visible to squeue/scontrol for an hour (MinJobAge), to sacct for good.
# As root, `mpirun` inside a job needs --allow-run-as-root.
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
if [[ $HOSTS == namespaces ]]; then CGROUPS=${SRL_SLURM_CGROUPS:-1}; else CGROUPS=0; fi
if ((CGROUPS)) && [[ $TASK_PLUGIN == task/affinity ]]; then
  TASK_PLUGIN=task/cgroup,task/affinity; PROCTRACK=proctrack/cgroup
else
  CGROUPS=0; PROCTRACK=proctrack/linuxproc
fi
# Two hardware threads per core on the namespaced hosts, where their CPUs come in pairs.
if [[ $HOSTS == namespaces ]] && ((NODE_CPUS % 2 == 0)); then THREADS_PER_CORE=2; else THREADS_PER_CORE=1; fi
ACCOUNTING=${SRL_SLURM_ACCOUNTING:-1}
DBD_CONF=$(dirname "$CONF")/slurmdbd.conf
CGROUP_CONF=$(dirname "$CONF")/cgroup.conf
DBD_PORT=6830  # away from slurmctld's 6817 and the nodes' 6819-6822
DB=$DIR/mariadb  # MariaDB's data directory (data/) and socket (run/)
DB_SOCKET=$DB/run/mysqld.sock
CLUSTER=srl-local
ACCOUNT=rl
USER_NAME=srl-user  # the ordinary user (ensure_user)
SMALL_MAX_JOBS=2 SMALL_MAX_SUBMIT=3  # QOS small's MaxJobsPerUser and MaxSubmitJobsPerUser
NODE_MEM_MB=${SRL_SLURM_MEM_MB:-20000}
SLURMD_TIMEOUT=${SRL_SLURMD_TIMEOUT:-45}
if [[ ${SRL_SLURM_HETSTEPS:-1} == 0 ]]; then HETERO_STEPS=,disable_hetero_steps; else HETERO_STEPS=; fi
NODES=(n1 n2 n3 n4)  # a het job needs a node per group: trainer, policy, buffer, actor
PIDS=$DIR/pids
MARKER="# Written by srl-hpc scripts/local_slurm.sh"
PACKAGES=(slurm-wlm slurmdbd mariadb-server munge openmpi-bin libopenmpi-dev iproute2)  # iproute2: the nodes' namespaces
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
  # no descriptor of the caller's beyond the standard three: a daemon that inherits, say, a `flock` held around
  # `start` would hold that lock for as long as it runs
  setsid "$@" >>"$DIR/log/$key.out" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
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
        ip link del "$host_end" 2>/dev/null || true  # one a process of a stopped cluster kept alive
        ip link add "$host_end" type veth peer name "${dev[$i]}" netns "$ns" || die "could not add $host_end for $ns"
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

# Whatever still runs on a node (an srun a hung job left behind, which outlives its slurmstepd) keeps the node's
# network namespace alive after `ip netns del`, and with it the veth the next start would add: nothing of a
# stopped cluster runs on.
kill_node_processes() {
  local n pids
  for n in "${NODES[@]}"; do
    pids=$(ip netns pids "srl-$n" 2>/dev/null) || continue
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
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
ClusterName=$CLUSTER
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
ProctrackType=$PROCTRACK
# task/affinity: a task is pinned to the CPUs it was given (-c), as on most clusters
TaskPlugin=$TASK_PLUGIN
MpiDefault=pmix
SwitchType=switch/none
JobCompType=jobcomp/none
EOF
    accounting_config
    if [[ $HOSTS == namespaces ]]; then
      echo "# The submitter's limits reach the job, except open files: PAM's (write_pam_config) apply."
      echo "PropagateResourceLimitsExcept=NOFILE"
      echo "UsePAM=1"
    fi
    cat <<EOF
SchedulerType=sched/backfill
# Defaults delay every sbatch by up to 3 s, hetjobs (started only by backfill) by up to 30 s, and a
# main scheduling pass by up to 60 s.
# Never add a word containing "defer" here: it stops srun from being placed at submit time.
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2$HETERO_STEPS
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
      echo "NodeName=$n NodeAddr=$(node_addr $k eth0) NodeHostname=$n Port=$((6818 + k)) CPUs=$NODE_CPUS $(node_topology) RealMemory=$NODE_MEM_MB Gres=gpu:2 State=UNKNOWN"
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
  write_cgroup_config
  [[ $HOSTS != namespaces ]] || write_pam_config
  ((ACCOUNTING)) && write_dbd_config
  return 0
}

# A node's Sockets/CoresPerSocket/ThreadsPerCore: two threads per core where THREADS_PER_CORE says so
# (slurmd would otherwise report the machine's own layout; config_overrides lets the declared one stand).
node_topology() {
  echo "Sockets=1 CoresPerSocket=$((NODE_CPUS / THREADS_PER_CORE)) ThreadsPerCore=$THREADS_PER_CORE"
}

# slurm.conf's accounting lines: slurmdbd, enforcing associations and QOS limits, or none at all.
accounting_config() {
  if ((ACCOUNTING)); then
    cat <<EOF
# Accounting through slurmdbd (slurmdbd.conf, next to this file): sacct works, and only users with an
# association (account $ACCOUNT) may submit; QOS limits (e.g. --qos=small) are enforced.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(ctld_addr)
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
EOF
  else
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
  fi
}

# cgroup.conf, read by slurmd when the cgroup plugins are on; removed (if ours) when they are off.
write_cgroup_config() {
  if ((CGROUPS)); then
    {
      echo "$MARKER"
      # This kernel mounts the v1 controllers under /sys/fs/cgroup (and cgroup2 at .../unified).
      echo "CgroupPlugin=cgroup/v1"
      echo "ConstrainCores=yes"
      echo "ConstrainRAMSpace=yes"
      echo "ConstrainDevices=yes"
    } >"$CGROUP_CONF"
  elif [[ -f $CGROUP_CONF ]] && head -n 1 "$CGROUP_CONF" | grep -qF "$MARKER"; then
    rm -f "$CGROUP_CONF"
  fi
}

# A soft open-files limit of 1024 in jobs, as clusters give users, with this machine's hard limit above it.
# Not by starting slurmd under `ulimit -Sn 1024`: slurmd and slurmstepd raise their own soft limit to the
# hard one, and a limit not propagated from the submitter is slurmstepd's. With UsePAM=1 slurmstepd
# opens a PAM session of service `slurm` before it forks the tasks, and pam_limits sets the limits
# there, as on most clusters. Hard limits are given too: pam_limits otherwise takes PID 1's, and
# raising a hard limit above this machine's is refused here (no CAP_SYS_RESOURCE).
write_pam_config() {
  local pam=/etc/pam.d/slurm who
  if [[ -f $pam ]] && ! head -n 1 "$pam" | grep -qF "$MARKER" && [[ ${SRL_SLURM_FORCE:-} != 1 ]]; then
    die "$pam exists and was not written by this script; set SRL_SLURM_FORCE=1 to replace it"
  fi
  printf '%s\nsession required pam_limits.so conf=%s\n' "$MARKER" "$DIR/limits.conf" >"$pam"
  {
    echo "$MARKER"
    for who in '*' root; do  # `*` does not cover root
      echo "$who soft nofile 1024"
      echo "$who hard nofile $(ulimit -Hn)"
      echo "$who - memlock $(ulimit -Hl)"
    done
  } >"$DIR/limits.conf"
}

# slurmdbd.conf: slurmdbd refuses a file others can read (it may hold a database password).
write_dbd_config() {
  (umask 077; cat >"$DBD_CONF" <<EOF
$MARKER; rewritten on every start. State: $DIR
AuthType=auth/munge
DbdHost=$(hostname -s)
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
# MariaDB of this script's own, reached through its socket (MYSQL_UNIX_PORT, set where slurmdbd starts)
# as root, whom MariaDB knows by the socket's peer (unix_socket authentication): no password anywhere.
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
  )
  chmod 600 "$DBD_CONF"
}

make_dirs() {
  local n i
  mkdir -p "$DIR"/{state,run,log,fakegpu} "$PIDS"
  for n in "${NODES[@]}"; do
    mkdir -p "$DIR/spool/$n" "$DIR/tmp/$n"
    for i in 0 1; do fake_gpu "$DIR/fakegpu/$n-$i" "$i"; done
  done
}

# fake_gpu FILE I: a character-device file with the numbers of /dev/nvidiaI (195, I). Slurm only stat()s
# it, and ConstrainDevices denies a job the numbers of the GPUs it was not given: with /dev/null's
# numbers (1, 3), as these files once had, every job without GPUs would lose /dev/null.
fake_gpu() {
  [[ $(stat -c '%F %t %T' "$1" 2>/dev/null) == "character special file c3 $2" ]] && return 0
  rm -f "$1"
  mknod "$1" c 195 "$2"
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

# ---------------------------------------------------------------- accounting (SRL_SLURM_ACCOUNTING=1)
# MariaDB with a data directory of its own under $DB, reached only through its socket (no network), as
# the mysql user; its data outlives `stop`, so jobs stay in sacct across restarts.
start_mariadb() {
  daemon_alive mariadbd mariadbd && return 0
  command -v mariadbd >/dev/null || die "MariaDB is not installed; run: $0 install"
  mkdir -p "$DB/run"; chown mysql:mysql "$DB" "$DB/run"
  if [[ ! -d $DB/data ]]; then  # first start: create it aside, then move it in, so a failure leaves none
    rm -rf "$DB/data.new"
    mariadb-install-db --no-defaults --datadir="$DB/data.new" --user=mysql --skip-test-db \
      --auth-root-authentication-method=socket >>"$DIR/log/mariadbd.out" 2>&1 ||
      die "mariadb-install-db failed; see $DIR/log/mariadbd.out"
    mv "$DB/data.new" "$DB/data"
  fi
  # innodb_lock_wait_timeout: slurmdbd warns below 900 (its rollups hold locks long on big sites).
  start_bg mariadbd mariadbd mariadbd --no-defaults --user=mysql --datadir="$DB/data" --socket="$DB_SOCKET" \
    --pid-file="$DB/run/mariadbd.pid" --skip-networking --innodb-lock-wait-timeout=900
  wait_for "MariaDB to answer on $DB_SOCKET" "$DIR/log/mariadbd.out" \
    mariadb-admin --no-defaults --socket="$DB_SOCKET" --silent ping
}

# slurmdbd, then the cluster, account, users and QOS registered (each only if missing: start is
# idempotent, and sacctmgr refuses to add what exists).
start_slurmdbd() {
  if ! daemon_alive slurmdbd slurmdbd; then
    command -v slurmdbd >/dev/null || die "slurmdbd is not installed; run: $0 install"
    start_bg slurmdbd slurmdbd env MYSQL_UNIX_PORT="$DB_SOCKET" slurmdbd -D
  fi
  wait_for "slurmdbd to answer" "$DIR/log/slurmdbd.log" sacctmgr -n show cluster
  register_accounting
}

# sacctmgr_do ARGS...: sacctmgr -i ARGS, failing with its output ("already exists" fails too: callers check
# first).
sacctmgr_do() {
  local out
  out=$(sacctmgr -i "$@" 2>&1) || die "sacctmgr $* failed: $out (slurmdbd's log: $DIR/log/slurmdbd.log)"
}

# The cluster, account rl with the users in it (default account rl, QOS small allowed) and QOS small's
# limits: asked for with two queries, registered only where missing, so a restart costs no more.
register_accounting() {
  local u users=(root "$USER_NAME")
  [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]] && users+=("$SUDO_USER")
  for u in ${SRL_SLURM_USERS:-}; do
    id "$u" >/dev/null 2>&1 || die "SRL_SLURM_USERS: no such user '$u'"
    users+=("$u")
  done
  if [[ $(sacctmgr -n -P show qos small format=name,maxjobspu,maxsubmitpu) != "small|$SMALL_MAX_JOBS|$SMALL_MAX_SUBMIT" ]]; then
    [[ -n $(sacctmgr -n -P show qos small format=name) ]] || sacctmgr_do add qos small
    sacctmgr_do modify qos small set MaxJobsPerUser=$SMALL_MAX_JOBS MaxSubmitJobsPerUser=$SMALL_MAX_SUBMIT
  fi
  local have  # lines user|default account|QOS of the users with an association in account rl
  have=$(sacctmgr -n -P show user withassoc where cluster="$CLUSTER" account="$ACCOUNT" format=user,defaultaccount,qos)
  for u in "${users[@]}"; do
    grep -qE "^$u\|$ACCOUNT\|(.*,)?small(,.*)?$" <<<"$have" || register_user "$u"
  done
}

register_user() {
  [[ -n $(sacctmgr -n -P show cluster "$CLUSTER" format=cluster) ]] || sacctmgr_do add cluster "$CLUSTER"
  [[ -n $(sacctmgr -n -P show account "$ACCOUNT" format=account) ]] ||
    sacctmgr_do add account "$ACCOUNT" cluster="$CLUSTER" description="srl-hpc tests" organization=srl-hpc
  [[ -n $(sacctmgr -n -P show assoc cluster="$CLUSTER" account="$ACCOUNT" user="$1" format=user) ]] ||
    sacctmgr_do add user "$1" account="$ACCOUNT" cluster="$CLUSTER"
  sacctmgr_do modify user "$1" set defaultaccount="$ACCOUNT" qos+=small
}

# wait_for WHAT LOG CMD...: until CMD succeeds, up to WAIT_S seconds; then fail naming LOG.
wait_for() {
  local what=$1 logfile=$2 deadline=$((SECONDS + WAIT_S)); shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      tail -n 15 "$logfile" >&2 || true
      die "timed out after ${WAIT_S}s (SRL_SLURM_WAIT) waiting for $what; see $logfile"
    fi
    sleep 0.1
  done
}

all_up() {
  if ((ACCOUNTING)); then daemon_alive mariadbd mariadbd && daemon_alive slurmdbd slurmdbd || return 1; fi
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

# The ordinary user jobs run as, as on every cluster (tests/test_slurm_user.py submits as it): a home of its
# own, which the nodes see like the rest of the shared filesystem, and no right to anything of root's.
ensure_user() {
  id "$USER_NAME" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$USER_NAME" ||
    die "could not create the user $USER_NAME"
}

cmd_start() {
  need_root
  command -v slurmctld >/dev/null || die "Slurm is not installed; run: $0 install"
  if all_up && sinfo >/dev/null 2>&1; then log "already running (state in $DIR)"; return 0; fi
  ensure_user
  make_dirs
  [[ $HOSTS == namespaces ]] && net_up
  write_config
  start_munge
  if ((ACCOUNTING)); then start_mariadb; start_slurmdbd; fi
  local fresh=0 n
  daemon_alive slurmctld slurmctld || { fresh=1; start_bg slurmctld slurmctld slurmctld -D; }
  for n in "${NODES[@]}"; do
    daemon_alive "slurmd-$n" slurmd || eval start_bg "slurmd-$n" slurmd "$(slurmd_command "$n")"
  done
  wait_nodes_up
  ((fresh)) && cancel_stale_jobs
  log "running: $(sinfo -h -o '%P %D %t' | tr '\n' ' ')(hosts: $HOSTS, $PROCTRACK, $TASK_PLUGIN, $(accounting_summary), config $CONF, state $DIR)"
}

accounting_summary() {
  if ((ACCOUNTING)); then echo "accounting: slurmdbd, account $ACCOUNT, QOS normal and small"; else echo "no accounting"; fi
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
  # The database after the daemon that writes to it (MariaDB flushes on SIGTERM).
  daemon_alive slurmdbd slurmdbd && stop_pids "slurmdbd:$(cat "$PIDS/slurmdbd")"
  daemon_alive mariadbd mariadbd && stop_pids "mariadbd:$(cat "$PIDS/mariadbd")"
  # munged only if this script started it (pid file exists only then).
  daemon_alive munged munged && stop_pids "munged:$(cat "$PIDS/munged")"
  for key in slurmctld slurmdbd mariadbd munged "${NODES[@]/#/slurmd-}"; do rm -f "$PIDS/$key"; done
  if [[ $HOSTS == namespaces ]]; then kill_node_processes; fi
  net_down
  log "stopped"
}

# ---------------------------------------------------------------- status / env
cmd_status() {
  local ok=0 n
  check() { if daemon_alive "$1" "$2"; then echo "$1: up (pid $(cat "$PIDS/$1"))"; else echo "$1: down"; ok=3; fi; }
  if munge_works; then echo "munge: up"; else echo "munge: down"; ok=3; fi
  if ((ACCOUNTING)); then check mariadbd mariadbd; check slurmdbd slurmdbd; fi
  check slurmctld slurmctld
  for n in "${NODES[@]}"; do check "slurmd-$n" slurmd; done
  sinfo 2>&1 || ok=3
  return $ok
}

# The running cluster's SchedulerParameters with or without disable_hetero_steps (SRL_SLURM_HETSTEPS at start),
# applied by `scontrol reconfigure`: tests/test_layout_jobs.py runs a site without het steps this way.
cmd_hetsteps() {
  need_root
  [[ ${1:-} == on || ${1:-} == off ]] || die "usage: $0 hetsteps on|off"
  head -n 1 "$CONF" 2>/dev/null | grep -qF "$MARKER" || die "$CONF was not written by this script; start the cluster first"
  sed -i 's/^\(SchedulerParameters=.*\),disable_hetero_steps$/\1/' "$CONF"
  [[ $1 == on ]] || sed -i 's/^SchedulerParameters=.*/&,disable_hetero_steps/' "$CONF"
  scontrol reconfigure || die "scontrol reconfigure failed: is the cluster running? ($0 status)"
  log "het steps $1: $(grep '^SchedulerParameters=' "$CONF")"
}

# A host lost at once, as when a node loses power: no process of it ends cleanly or says goodbye.
cmd_lose() {
  need_root
  local n=${1:-} pids
  [[ " ${NODES[*]} " == *" $n "* ]] || die "usage: $0 lose NODE (one of: ${NODES[*]})"
  [[ $HOSTS == namespaces ]] || die "lose needs hosts of their own (SRL_SLURM_HOSTS=namespaces)"
  pids=$(ip netns pids "srl-$n") || die "no namespace srl-$n: is the cluster running?"
  [[ -n $pids ]] || die "nothing runs in host $n"
  kill -9 $pids
  if [[ ${2:-} == --down ]]; then
    scontrol update NodeName="$n" State=DOWN Reason="lost (local_slurm.sh lose)" || die "scontrol could not set $n DOWN"
    log "host $n lost: SIGKILLed $(wc -w <<<"$pids") process(es); DOWN now"
  else
    log "host $n lost: SIGKILLed $(wc -w <<<"$pids") process(es); slurmctld marks it DOWN within ${SLURMD_TIMEOUT}s"
  fi
}

# A host cut off from the fast network only (a failed link or switch port): Slurm, on eth0, sees nothing wrong.
cmd_link() {
  need_root
  local n=${2:-}
  [[ " ${NODES[*]} " == *" $n "* ]] || die "usage: $0 $1 NODE (one of: ${NODES[*]})"
  [[ $HOSTS == namespaces ]] || die "$1 needs hosts of their own (SRL_SLURM_HOSTS=namespaces)"
  if [[ $1 == cut ]]; then ip -n "srl-$n" link set ib0 down; else ip -n "srl-$n" link set ib0 up; fi ||
    die "could not set ib0 of $n: is the cluster running?"
  log "host $n: ib0 $([[ $1 == cut ]] && echo down || echo up)"
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
  hetsteps) cmd_hetsteps "${2:-}" ;;
  lose) cmd_lose "${2:-}" "${3:-}" ;;
  cut | mend) cmd_link "$1" "${2:-}" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
