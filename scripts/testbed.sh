#!/usr/bin/env bash
# A two-host multicast testbed on one machine: two network namespaces joined by
# a veth pair, for live captures (ibvcap capture --source pcap) of live traffic
# (ibvcap gen --send) with real IGMP and real multicast, as root.
#
#   scripts/testbed.sh up     [NAME] [--antennas N]   create it (replacing a stale one)
#   scripts/testbed.sh down   [NAME]                  remove it
#   scripts/testbed.sh status [NAME]                  show it; exit 1 when it is not up
#   scripts/testbed.sh env    [NAME]                  print its names as shell assignments
#
# NAME defaults to "ibvcap"; give each concurrent user its own (the e2e tests
# use e2e<pid>). What `up` creates, and all that `down` removes:
#
#   namespace NAME-tx (sender)              namespace NAME-rx (capture)
#   veth NAME-t  10.0.0.11 ... 10.0.0.(10+N) <====> veth NAME-r  10.0.0.1
#   MTU 9000, lo up, route 224.0.0.0/4 dev NAME-t    MTU 9000, lo up, route 224.0.0.0/4
#                                                     dev NAME-r, rp_filter off
#
# The sender's addresses are the antennas (default 6, at most 16): the generator
# sends each antenna's frames from that source address.
#
# Addresses: 10.0.0.0/24, because `ibvcap gen`'s default antennas are 10.0.0.11,
# .12, ... (--antennas N). The commands stay short (`--antennas 6`, no --antenna
# list) and a live capture names its files exactly as `ibvcap gen -w` + `ibvcap
# read` do, so outputs compare byte for byte. It cannot clash with a host network
# on 10.0.0.0/24: the addresses exist only inside the two namespaces, which have
# no other interface and no route out.
#
# Interface names: Linux allows 15 characters. NAME-t / NAME-r when NAME has at
# most 13; otherwise the first 6 characters of NAME, 7 hex digits of a checksum
# of NAME, then -t / -r (e.g. a-very-long-name -> a-very1c2b3d4-t). `env` prints
# the names in use.
#
# IPv6 is switched off in both namespaces so that nothing but the test's own
# traffic (and the capture's IGMP) crosses the link: no neighbour discovery, no
# MLD. Nothing outside the two namespaces is touched.
set -Eeuo pipefail

usage() {
  echo "usage: $0 up|down|status|env [NAME] [--antennas N]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
action=$1
shift
name=ibvcap
antennas=6
while [ $# -gt 0 ]; do
  case $1 in
    --antennas)
      [ $# -ge 2 ] || usage
      antennas=$2
      shift 2
      ;;
    --antennas=*)
      antennas=${1#*=}
      shift
      ;;
    -*) usage ;;
    *)
      name=$1
      shift
      ;;
  esac
done
case $antennas in
  '' | *[!0-9]*) echo "testbed: --antennas must be 1-16" >&2; exit 2 ;;
esac
if [ "$antennas" -lt 1 ] || [ "$antennas" -gt 16 ]; then
  echo "testbed: --antennas must be 1-16" >&2
  exit 2
fi
case $name in
  '' | *[!A-Za-z0-9_.-]*) echo "testbed: NAME may hold only letters, digits, '.', '_' and '-'" >&2; exit 2 ;;
esac

tx_ns=$name-tx
rx_ns=$name-rx
if [ ${#name} -le 13 ]; then
  short=$name
else
  short=${name:0:6}$(printf '%07x' $(($(printf '%s' "$name" | cksum | cut -d' ' -f1) % 268435456)))
fi
tx_if=$short-t
rx_if=$short-r
rx_ip=10.0.0.1
prefix_len=24

tx_ips() {
  local i
  for ((i = 1; i <= antennas; i++)); do
    printf '10.0.0.%d ' $((10 + i))
  done
}

ns_exists() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$1"
}

need_root() {
  if ! command -v ip >/dev/null; then
    echo "testbed: 'ip' (iproute2) is not installed: run scripts/install-deps.sh" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "testbed: network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN): run as root" >&2
    exit 1
  fi
}

down() {
  local ns pid pids
  for ns in "$tx_ns" "$rx_ns"; do
    ns_exists "$ns" || continue
    # Processes still running inside our own namespace (a capture or a sender
    # left behind by a killed test) would keep it, and its veth, alive.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
      sleep 0.5
      for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    fi
    ip netns delete "$ns"
  done
}

up() {
  down
  if ! err=$(ip netns add "$tx_ns" 2>&1); then
    echo "testbed: cannot create network namespace $tx_ns: $err (needs root with CAP_SYS_ADMIN, and /run/netns writable)" >&2
    exit 1
  fi
  trap 'echo "testbed: setup of $name failed; removing it" >&2; down' ERR
  ip netns add "$rx_ns"
  local ns
  for ns in "$tx_ns" "$rx_ns"; do
    # Absent when the kernel has no IPv6: then there is nothing to silence.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
      net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
    ip -n "$ns" link set lo up
  done
  # Created inside the namespaces, so the names never exist in the host's.
  ip -n "$tx_ns" link add "$tx_if" type veth peer name "$rx_if" netns "$rx_ns"
  ip -n "$tx_ns" link set "$tx_if" mtu 9000
  ip -n "$rx_ns" link set "$rx_if" mtu 9000
  ip netns exec "$rx_ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
    net.ipv4.conf.default.rp_filter=0 "net.ipv4.conf.$rx_if.rp_filter=0"
  ip -n "$rx_ns" addr add "$rx_ip/$prefix_len" dev "$rx_if"
  local ip
  for ip in $(tx_ips); do
    ip -n "$tx_ns" addr add "$ip/$prefix_len" dev "$tx_if"
  done
  ip -n "$tx_ns" link set "$tx_if" up
  ip -n "$rx_ns" link set "$rx_if" up
  ip -n "$tx_ns" route add 224.0.0.0/4 dev "$tx_if"
  ip -n "$rx_ns" route add 224.0.0.0/4 dev "$rx_if"
  # Both ends report carrier at once on a veth; wait for it anyway (2 s).
  local i
  for ((i = 0; i < 40; i++)); do
    if ip -n "$rx_ns" link show "$rx_if" | grep -q 'state UP' &&
      ip -n "$tx_ns" link show "$tx_if" | grep -q 'state UP'; then
      break
    fi
    sleep 0.05
  done
  trap - ERR
  echo "testbed $name up: $tx_ns/$tx_if ($(tx_ips | sed 's/ $//')) <-> $rx_ns/$rx_if ($rx_ip)"
}

status() {
  if ! ns_exists "$tx_ns" || ! ns_exists "$rx_ns"; then
    echo "testbed $name: down"
    return 1
  fi
  echo "testbed $name: up"
  local ns
  for ns in "$tx_ns" "$rx_ns"; do
    echo "== $ns"
    ip -n "$ns" -brief link
    ip -n "$ns" -brief -4 addr
    ip -n "$ns" route show table main
    ip netns exec "$ns" sysctl net.ipv4.conf.all.rp_filter
    echo "IGMP memberships:"
    ip netns exec "$ns" cat /proc/net/igmp
  done
}

case $action in
  up) need_root; up ;;
  down) need_root; down ;;
  status) need_root; status ;;
  env)
    echo "TB_NAME=$name TX_NS=$tx_ns RX_NS=$rx_ns TX_IF=$tx_if RX_IF=$rx_if RX_IP=$rx_ip"
    ;;
  *) usage ;;
esac
