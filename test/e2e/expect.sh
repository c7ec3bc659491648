#!/usr/bin/env bash
# e2e expect: `ibvcap capture --expect FILE` against live senders in the
# testbed's namespaces (issue 16, item 1). Two captures:
#
#   A. The manifest expects groups 1-3, antennas .11 .12 .13 .15 .16 with
#      threads 0-1 (.12: 0-2). Three senders: .11 .12 .14 (threads 0-1) to
#      groups 1-2 at the header's rate; .16 (thread 0-1) at half its header's
#      rate; .15 started 2.5 s late. Nothing goes to group 3, nothing from .13,
#      no thread 2 from .12, and .14 is not in the manifest. Every case with its
#      own reason and count; exit 3.
#   B. Only the unexpected stream: the manifest's streams all on time, plus
#      .14; exit 0 (an unexpected stream loses nothing).
#
# About 12 s. Payload 1024 bytes to keep a 2-core CI machine's veth fast.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

G1=239.17.0.1:36001
G2=239.17.0.2:36001
G3=239.17.0.3:36001
COMMON=(--payload 1024 --threads 2 -q)

testbed_up

cat >"$WORK/a.json" <<EOF
{
  "comment": "e2e expect, capture A",
  "groups": ["$G1", "$G2", "$G3"],
  "antennas": ["10.0.0.11", {"ip": "10.0.0.12", "threads": 3}, "10.0.0.13", "10.0.0.15",
               "10.0.0.16"],
  "threads": 2
}
EOF

# capture A: 12 + 4 + 4 streams of 4000 / 2000 / 1500 frames.
PACKETS=$((12 * 4000 + 4 * 2000 + 4 * 1500))
say "capture A: --expect a.json on $G1 $G2 $G3, $PACKETS packets"
start capture-a.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q --report "$WORK/a.report.json" \
  --expect "$WORK/a.json" --expect-grace 1 --expect-rate-tolerance 0.25 \
  -c "$PACKETS" --duration 30 "$G1" "$G2" "$G3"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "$G1" "$G2" "$G3"
# On time: .11 .12 .14 x 2 threads x 2 groups at 1000 frames/s each (the
# header's 1000 frames per 1 s period), for 4 s.
start send-ontime.log tx "$IBVCAP" gen --send -i "$TX_IF" "${COMMON[@]}" -c 4000 --rate 12000 \
  --antenna 10.0.0.11 --antenna 10.0.0.12 --antenna 10.0.0.14 "$G1" "$G2"
ONTIME=$STARTED
# Wrong rate: .16 x 2 threads x 2 groups at 500 frames/s each, for 4 s.
start send-slow.log tx "$IBVCAP" gen --send -i "$TX_IF" "${COMMON[@]}" -c 2000 --rate 2000 \
  --antenna 10.0.0.16 "$G1" "$G2"
SLOW=$STARTED
# Late: .15 from 2.5 s after the join (the grace is 1 s), for 1.5 s: it ends
# with the others.
sleep 2.5
start send-late.log tx "$IBVCAP" gen --send -i "$TX_IF" "${COMMON[@]}" -c 1500 --rate 4000 \
  --antenna 10.0.0.15 "$G1" "$G2"
LATE=$STARTED
for pid in "$ONTIME" "$SLOW" "$LATE"; do
  finish "$pid" 20
  expect_eq "sender exit code" "$RC" 0
done
finish "$CAPTURE" 20
expect_eq "capture A exit code (3 = loss)" "$RC" 3
R=$WORK/a.report.json
expect_eq "A: verdict" "$(j "$R" .verdict)" loss
expect_eq "A: totals.missing" "$(j "$R" .totals.missing)" 0
expect_eq "A: streams expected" "$(j "$R" .expected.streams_expected)" $((3 * (5 * 2 + 1)))
expect_eq "A: streams listed" "$(j "$R" '.expected.streams | length')" $((3 * 11 + 4))
# state GROUP ANTENNA THREAD: the report's state of one stream.
state() {
  j "$R" ".expected.streams[] | select(.group == \"$1\" and .antenna == \"$2\" and .thread == $3) | .state"
}
problem() { j "$R" ".expected.problems.$1"; }
expect_eq "A: group_never_seen" "$(problem group_never_seen)" 11
expect_eq "A: $G3 10.0.0.11 thread 0" "$(state $G3 10.0.0.11 0)" group_never_seen
expect_eq "A: antenna_missing" "$(problem antenna_missing)" 4
expect_eq "A: $G1 10.0.0.13 thread 1" "$(state $G1 10.0.0.13 1)" antenna_missing
expect_eq "A: thread_missing" "$(problem thread_missing)" 2
expect_eq "A: $G2 10.0.0.12 thread 2" "$(state $G2 10.0.0.12 2)" thread_missing
expect_eq "A: unexpected" "$(problem unexpected)" 4
expect_eq "A: $G1 10.0.0.14 thread 0" "$(state $G1 10.0.0.14 0)" unexpected
expect_eq "A: late_start" "$(problem late_start)" 4
expect_eq "A: $G2 10.0.0.15 thread 1" "$(state $G2 10.0.0.15 1)" late_start
expect_eq "A: wrong_rate" "$(problem wrong_rate)" 4
expect_eq "A: $G1 10.0.0.16 thread 0" "$(state $G1 10.0.0.16 0)" wrong_rate
expect_eq "A: stopped_early" "$(problem stopped_early)" 0
expect_eq "A: as expected" "$(j "$R" .expected.as_expected)" 8
for kind in group_never_seen antenna_missing thread_missing late_start wrong_rate; do
  grep -q "LOSS $kind:" "$WORK/capture-a.log" || fail "capture A's summary has no '$kind' line"
done
grep -q "note unexpected: 4 streams" "$WORK/capture-a.log" || fail "capture A's summary has no unexpected line"
say "A: every case with its own reason and count; exit 3"

cat >"$WORK/b.json" <<EOF
{"groups": ["$G1"], "antennas": ["10.0.0.11", "10.0.0.12"], "threads": [0, 1]}
EOF
PACKETS=$((6 * 2000))
say "capture B: --expect b.json on $G1, $PACKETS packets, one antenna unexpected"
start capture-b.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q --report "$WORK/b.report.json" \
  --expect "$WORK/b.json" --expect-grace 1 --expect-rate-tolerance 0.25 \
  -c "$PACKETS" --duration 30 "$G1"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "$G1"
start send-b.log tx "$IBVCAP" gen --send -i "$TX_IF" "${COMMON[@]}" -c 2000 --rate 6000 \
  --antenna 10.0.0.11 --antenna 10.0.0.12 --antenna 10.0.0.14 "$G1"
finish "$STARTED" 20
expect_eq "sender exit code" "$RC" 0
finish "$CAPTURE" 20
expect_eq "capture B exit code (0 = zero-loss)" "$RC" 0
R=$WORK/b.report.json
expect_eq "B: verdict" "$(j "$R" .verdict)" zero-loss
expect_eq "B: unexpected" "$(problem unexpected)" 2
expect_eq "B: as expected" "$(j "$R" .expected.as_expected)" 4
expect_eq "B: $G1 10.0.0.14 thread 1" "$(state $G1 10.0.0.14 1)" unexpected
say "B: an unexpected stream is listed; exit 0"
pass
