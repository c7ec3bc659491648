#!/usr/bin/env bash
# e2e ssm: a source-specific group of 40 antennas (verbs-mlx5-3.md R4). The
# kernel takes at most net.ipv4.igmp_max_msf sources (10 by default) per
# socket and group (net/ipv4/igmp.c ip_mc_source: ENOBUFS), so ibvcap spreads
# the sources over sockets:
#   (a) GROUP:PORT@ 40 sources (10.0.0.12 .. 10.0.0.51) at the default limit:
#       the kernel holds all 40 source filters on RX (/proc/net/mcfilter); 16
#       antennas send (10.0.0.11 .. 10.0.0.26): the 15 listed are captured
#       whole, 10.0.0.11's frames are unlisted_source; zero-loss;
#   (b) igmp_max_msf 3 in the receiving namespace (the sysctl is per
#       namespace): the same 40 sources are joined (14 sockets);
#   (c) igmp_max_msf 0: every source join is refused, and the capture says so
#       in one line naming net.ipv4.igmp_max_msf (exit 1).
# Usage: ssm.sh IBVCAP_BINARY SOURCE_DIR
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

GROUP=239.17.0.5:36001
MCAST=("$GROUP")
FRAMES=200
GEN=(--antennas 16 --threads 1 -c "$FRAMES" --payload 512)
DURATION=5
SOURCES=$(seq -s, -f '10.0.0.%g' 12 51)

testbed_up --antennas 16
ifindex=$(rx cat "/sys/class/net/$RX_IF/ifindex")
# /proc/net/mcfilter: Idx Device MCA SRC INC EXC, the group as 0x%08x in host order.
# shellcheck disable=SC2016 # awk's own fields
filters() { rx awk -v idx="$ifindex" '$1 == idx && $3 == "0xef110005" { n++ } END { print n + 0 }' /proc/net/mcfilter; }

say "(a) $GROUP from 40 sources, igmp_max_msf $(rx sysctl -n net.ipv4.igmp_max_msf)"
start a.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/a.json" \
  --duration "$DURATION" "$GROUP@$SOURCES"
capture=$STARTED
wait_for_join "$capture" 10 "$GROUP"
expect_eq "source filters held on $RX_IF" "$(filters)" 40
send_traffic 30 --rate 8000
finish "$capture" $((DURATION + 20))
expect_eq "capture exit code (a)" "$RC" 0
R=$WORK/a.json
expect_eq verdict "$(j "$R" .verdict)" zero-loss
expect_eq "groups[0].sources" "$(jq '.groups[0].sources | length' "$R")" 40
expect_eq "CODIF frames of the 15 listed senders" "$(j "$R" .totals.codif)" $((15 * FRAMES))
expect_eq "10.0.0.11's frames (not listed)" "$(j "$R" .reasons.non_codif.unlisted_source)" "$FRAMES"
expect_eq "streams" "$(jq '.streams | length' "$R")" 15
say "40 source filters held; $((15 * FRAMES)) frames of 15 listed antennas kept, $FRAMES of 10.0.0.11 not ours"

say "(b) igmp_max_msf 3: 40 sources over 14 sockets"
rx sysctl -qw net.ipv4.igmp_max_msf=3
start b.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/b.json" \
  --duration 2 "$GROUP@$SOURCES"
capture=$STARTED
wait_for_join "$capture" 10 "$GROUP"
expect_eq "source filters held at igmp_max_msf 3" "$(filters)" 40
finish "$capture" 20
# Nothing is sent in (b): the join is what is checked; a run without frames
# ends as loss (exit 3), not as an error (1).
expect_eq "capture exit code (b), no traffic" "$RC" 3

say "(c) igmp_max_msf 0: no source can be joined"
rx sysctl -qw net.ipv4.igmp_max_msf=0
start c.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/c.json" \
  --duration 2 "$GROUP@$SOURCES"
finish "$STARTED" 20
expect_eq "capture exit code (c)" "$RC" 1
grep -q 'net.ipv4.igmp_max_msf' "$WORK/c.log" || fail "the refusal does not name net.ipv4.igmp_max_msf: $(cat "$WORK/c.log")"
expect_eq "filters left behind" "$(filters)" 0
say "refused: $(grep -m1 'igmp_max_msf' "$WORK/c.log")"
pass
