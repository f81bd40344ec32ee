#!/usr/bin/env bash
# Test hosts for the cluster tests: N network namespaces (mbt-h1 ... mbt-hN), each with a veth pair
# to a private bridge in this machine's namespace, on 10.250.77.0/24 (the bridge, where the engine
# listens, is .1; host i is .(10 + i)). Nothing is routed anywhere else, so no test traffic leaves
# the machine. Each host gets its own host name when a command enters it through netns_rsh.
#
# usage: tests/hosts/test_hosts.sh up [N] DIR   make N hosts (default 2), write DIR/hostfile
#        tests/hosts/test_hosts.sh down         remove every test host and the bridge
#        tests/hosts/test_hosts.sh check        exit 0 when the hosts are up, 77 when not
#        tests/hosts/test_hosts.sh heal         links back up after a test cut them, fresh neighbours
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN); exits 77 without it, which CTest counts as skipped.
set -euo pipefail

readonly bridge=mbt-br0 subnet=10.250.77 prefix=mbt-h

hosts() { ip netns list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 { print $1 }'; }

down() {
  local h
  for h in $(hosts); do ip netns del "$h"; done
  ip link del "$bridge" 2>/dev/null || true
}

up() {
  local count=$1 dir=$2 i h
  if ! ip netns add mbt-probe 2>/dev/null; then
    echo "test_hosts: cannot create network namespaces here (needs root: CAP_NET_ADMIN and CAP_SYS_ADMIN)" >&2
    exit 77
  fi
  ip netns del mbt-probe
  down
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  mkdir -p "$dir"
  : > "$dir/hostfile"
  for ((i = 1; i <= count; i++)); do
    h=$prefix$i
    ip netns add "$h"
    ip link add "$h-v" type veth peer name eth0 netns "$h"
    ip link set "$h-v" master "$bridge" up
    ip -n "$h" addr add "$subnet.$((10 + i))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    echo "$h slots=4" >> "$dir/hostfile"
  done
  echo "test_hosts: $count hosts up ($(hosts | tr '\n' ' ')), hostfile $dir/hostfile"
}

# After a test took a link (or the bridge) down: every link up, each bridge port forwarding, and the
# neighbour (ARP) caches on both sides emptied. An entry that went on probing while its link was
# down can fail a moment after the link is back without having sent a probe over it, and take the
# next connection with it (EHOSTUNREACH: Open MPI's daemon then cannot reach mpirun); a fresh entry
# resolves over the link as it is.
heal() {
  local h tries
  ip link set "$bridge" up
  for h in $(hosts); do
    ip link set "$h-v" up
    ip -n "$h" link set eth0 up
  done
  for h in $(hosts); do
    # 3 is BR_STATE_FORWARDING (include/uapi/linux/if_bridge.h).
    for ((tries = 0; tries < 200; tries++)); do
      [[ $(cat "/sys/class/net/$h-v/brport/state" 2>/dev/null) == 3 &&
         $(cat "/sys/class/net/$h-v/operstate" 2>/dev/null) == up ]] && break
      sleep 0.05
    done
    if ((tries == 200)); then
      echo "test_hosts: $h's link does not come back up" >&2
      exit 1
    fi
    ip -n "$h" neigh flush all
  done
  ip neigh flush dev "$bridge"
}

case ${1:-} in
  up) if [[ $# == 3 ]]; then up "$2" "$3"; else up 2 "${2:?usage: $0 up [N] DIR}"; fi ;;
  down) down ;;
  check) [[ -n $(hosts) ]] || exit 77 ;;
  heal) heal ;;
  *) echo "usage: $0 up [N] DIR | down | check | heal" >&2; exit 2 ;;
esac
