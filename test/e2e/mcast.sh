#!/usr/bin/env bash
# e2e mcast: the multicast path (docs/operations.md, "The multicast path").
# A capture joins two groups; the sender sends only the first. Twice:
#   (a) no IGMP querier on the link: the report lists the first group seen,
#       with join_to_first_ms >= 0 and below the run's length, and the second
#       joined but never seen; igmp says no querier heard; the summary names
#       the switch (enable an IGMP snooping querier on the VLAN). Exit 0: a
#       group never seen is not loss by itself (docs/formats.md, "groups").
#   (b) a querier in the sender's namespace (test/igmp_querier.cpp: two
#       IGMPv3 general queries, then one IGMPv2) while the capture runs: igmp
#       says heard, 3 queries, from 10.0.0.11, last IGMPv2; the summary points
#       at the sender instead.
#   (c) a source-specific join (GROUP:PORT@SOURCE, verbs-mlx5-2.md N7) while
#       two antennas send the group: the kernel holds a source filter of the
#       named source only (/proc/net/mcfilter), the report keeps that source's
#       frames, counts the other's as unlisted_source and lists the group's
#       sources; zero-loss.
# Usage: mcast.sh IBVCAP_BINARY SOURCE_DIR IGMP_QUERIER_BINARY
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

QUERIER=$(readlink -f "${3:-}")
[ -x "$QUERIER" ] || fail "no igmp_querier binary at '${3:-}' (the third argument)"
SENT=239.17.0.1:36001
SILENT=239.17.0.9:36001
MCAST=("$SENT")
GEN=(--antennas 1 --threads 1 -c 2000 --payload 1024)
DURATION=4

testbed_up

# run_case NAME [HOOK]: capture both groups for DURATION s; once they are
# joined, HOOK (a function) and then the traffic. Report in $WORK/NAME.json,
# summary in $WORK/NAME.log.
run_case() {
  local name=$1 hook=${2:-}
  start "$name.log" rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/$name.json" \
    --duration "$DURATION" "$SENT" "$SILENT"
  local capture=$STARTED
  wait_for_join "$capture" 10 "$SENT" "$SILENT"
  [ -z "$hook" ] || "$hook"
  send_traffic 30 --rate 10000
  finish "$capture" $((DURATION + 20))
  expect_eq "capture exit code ($name; a group never seen is not loss)" "$RC" 0
}

# Two IGMPv3 general queries 50 ms apart, then one IGMPv2, from 10.0.0.11.
send_queries() {
  tx "$QUERIER" "$TX_IF" 10.0.0.11 3 2 50 >>"$WORK/igmp_querier.log" 2>&1 || fail "igmp_querier (v3) failed"
  tx "$QUERIER" "$TX_IF" 10.0.0.11 2 1 0 >>"$WORK/igmp_querier.log" 2>&1 || fail "igmp_querier (v2) failed"
}

# check_groups REPORT: the sent group seen after its join, the silent one never.
check_groups() {
  local r=$1 ms
  expect_eq "groups in the report" "$(j "$r" '.groups | length')" 2
  expect_eq "groups[0].group" "$(j "$r" '.groups[0].group')" "$SENT"
  expect_eq "groups[0].interface" "$(j "$r" '.groups[0].interface')" "$RX_IF"
  expect_eq "groups[0].seen" "$(j "$r" '.groups[0].seen')" true
  expect_eq "groups[0].frames" "$(j "$r" '.groups[0].frames')" 2000
  j "$r" '.groups[0].joined_at' >/dev/null
  j "$r" '.groups[0].first_frame_at' >/dev/null
  ms=$(j "$r" '.groups[0].join_to_first_ms')
  jq -e --argjson d "$DURATION" '.groups[0].join_to_first_ms | . >= 0 and . < $d * 1000' "$r" \
    >/dev/null || fail "join_to_first_ms $ms is not within [0, $DURATION s)"
  expect_eq "groups[1].group" "$(j "$r" '.groups[1].group')" "$SILENT"
  expect_eq "groups[1].seen" "$(j "$r" '.groups[1].seen')" false
  expect_eq "groups[1].frames" "$(j "$r" '.groups[1].frames')" 0
  expect_eq "groups[1].first_frame_at" "$(jq -r '.groups[1].first_frame_at' "$r")" null
  j "$r" '.groups[1].joined_at' >/dev/null
  say "$SENT seen ${ms} ms after its join; $SILENT joined, never seen"
}

say "(a) no querier on the link"
run_case noquerier
R=$WORK/noquerier.json
expect_eq verdict "$(j "$R" .verdict)" zero-loss
check_groups "$R"
expect_eq "igmp[0].interface" "$(j "$R" '.igmp[0].interface')" "$RX_IF"
expect_eq "igmp[0].querier" "$(j "$R" '.igmp[0].querier')" "not heard"
expect_eq "igmp[0].querier_heard" "$(j "$R" '.igmp[0].querier_heard')" false
expect_eq "igmp[0].queries" "$(j "$R" '.igmp[0].queries')" 0
line=$(grep -F "NEVER SEEN: joined $SILENT on $RX_IF at" "$WORK/noquerier.log") ||
  fail "the summary has no NEVER SEEN line for $SILENT"
grep -qF "no IGMP querier was heard on $RX_IF" <<<"$line" || fail "the line does not say no querier was heard: $line"
grep -qF "enable an IGMP snooping querier on the VLAN" <<<"$line" || fail "the line does not name the fix: $line"
grep -qF "NEVER SEEN: joined $SENT" "$WORK/noquerier.log" && fail "the summary says $SENT was never seen"
say "summary: $line"

say "(b) a querier in $TX_NS: 2 IGMPv3 then 1 IGMPv2 general queries from 10.0.0.11"
run_case querier send_queries
R=$WORK/querier.json
check_groups "$R"
expect_eq "igmp[0].querier" "$(j "$R" '.igmp[0].querier')" heard
expect_eq "igmp[0].querier_heard" "$(j "$R" '.igmp[0].querier_heard')" true
expect_eq "igmp[0].queries" "$(j "$R" '.igmp[0].queries')" 3
expect_eq "igmp[0].general_queries" "$(j "$R" '.igmp[0].general_queries')" 3
expect_eq "igmp[0].last_querier" "$(j "$R" '.igmp[0].last_querier')" 10.0.0.11
expect_eq "igmp[0].last_version" "$(j "$R" '.igmp[0].last_version')" 2
line=$(grep -F "NEVER SEEN: joined $SILENT on $RX_IF at" "$WORK/querier.log") ||
  fail "the summary has no NEVER SEEN line for $SILENT"
grep -qF "an IGMP querier was heard on $RX_IF (10.0.0.11, IGMPv2)" <<<"$line" ||
  fail "the line does not say a querier was heard: $line"
grep -qF "check the sender" <<<"$line" || fail "the line does not point at the sender: $line"
grep -qF "IGMP querier on $RX_IF: heard (3 queries, last from 10.0.0.11, IGMPv2)" \
  "$WORK/querier.log" || fail "the summary has no querier line"
say "summary: $line"

say "(c) $SENT@10.0.0.12 while 10.0.0.11 and 10.0.0.12 both send it"
GEN=(--antennas 2 --threads 1 -c 2000 --payload 1024)
start ssm.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/ssm.json" \
  --duration "$DURATION" "$SENT@10.0.0.12"
capture=$STARTED
wait_for_join "$capture" 10 "$SENT"
# /proc/net/mcfilter: Idx Device MCA SRC INC EXC, addresses as 0x%08x in host
# order, the device name cut to 6 characters (net/ipv4/igmp.c
# igmp_mcf_seq_show): matched by its index.
ifindex=$(rx cat "/sys/class/net/$RX_IF/ifindex")
filters=$(rx awk -v idx="$ifindex" '$1 == idx { print $3, $4 }' /proc/net/mcfilter)
expect_eq "source filters held on $RX_IF" "$filters" "0xef110001 0x0a00000c"
send_traffic 30 --rate 10000
finish "$capture" $((DURATION + 20))
expect_eq "capture exit code (ssm)" "$RC" 0
R=$WORK/ssm.json
expect_eq verdict "$(j "$R" .verdict)" zero-loss
expect_eq "groups[0].sources" "$(jq -c '.groups[0].sources' "$R")" '["10.0.0.12"]'
expect_eq "CODIF frames kept (10.0.0.12's)" "$(j "$R" .totals.codif)" 2000
expect_eq "the other sender's frames" "$(j "$R" .reasons.non_codif.unlisted_source)" 2000
expect_eq "antennas of the streams" "$(jq -c '[.streams[].antenna] | unique' "$R")" '["10.0.0.12"]'
say "source filter $filters held; 2000 frames of 10.0.0.12 kept, 2000 of 10.0.0.11 not ours"
pass
