#!/usr/bin/env bash
# e2e metrics: `ibvcap capture --source pcap --metrics-file F --metrics-interval 1`
# of 8 live streams (2 groups x 2 antennas x 2 threads, 750 frames each at
# 2,000 packets/s: about 3 s). While the capture runs the file exists, is
# rewritten (its update time moves) and passes `promtool check metrics` every
# time it is read; at the end it passes again, says the run is over
# (ibvcap_up 0) and zero-loss, and its totals and per-stream counts equal the
# report's (docs/observability.md, "Metrics"). promtool is Debian's
# `prometheus` package (scripts/install-deps.sh); without it the test fails.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
require_tools promtool

PER_STREAM=750
RATE=2000
MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 2 --threads 2 -c "$PER_STREAM" --payload 1024)
PACKETS=$((PER_STREAM * 8))
M=$WORK/textfile/ibvcap.prom
mkdir -p "$WORK/textfile"

# promtool_ok FILE WHEN: `promtool check metrics` (stdin) finds nothing in FILE.
promtool_ok() {
  local out rc=0
  out=$(promtool check metrics <"$1" 2>&1) || rc=$?
  if [ "$rc" != 0 ] || [ -n "$out" ]; then
    fail "promtool check metrics on the file $2 (exit $rc): $out ($(head -c 600 "$1"))"
  fi
}

# metric FILE NAME: the value of the series NAME{run="ibvcap"} (the run label
# is the file's name without .prom).
metric() {
  awk -v s="$2{run=\"ibvcap\"}" '$1 == s { print $2; found = 1 } END { exit !found }' "$1" ||
    fail "no series $2{run=\"ibvcap\"} in $1"
}

testbed_up
say "capture in $RX_NS on $RX_IF with --metrics-file $M --metrics-interval 1"
start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q -o "$WORK/out" -F codif \
  --report "$WORK/r.json" --metrics-file "$M" --metrics-interval 1 -c "$PACKETS" --duration 60 \
  "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
wait_for_file "$M" 5
say "the metrics file appeared"

start send.log tx "$IBVCAP" gen --send -i "$TX_IF" --rate "$RATE" "${GEN[@]}" "${MCAST[@]}"
SENDER=$STARTED
# While the capture runs: every read of the file passes promtool, says up 1, and
# the file is rewritten.
checks=0
first_update=
last_update=
while kill -0 "$CAPTURE" 2>/dev/null; do
  cp "$M" "$WORK/during.prom" # one read: the copy is what a collector would see
  kill -0 "$CAPTURE" 2>/dev/null || break
  promtool_ok "$WORK/during.prom" "during the run"
  # The final file (up 0) is written just before the process ends.
  [ "$(metric "$WORK/during.prom" ibvcap_up)" = 1 ] || break
  last_update=$(metric "$WORK/during.prom" ibvcap_last_update_time_seconds)
  first_update=${first_update:-$last_update}
  checks=$((checks + 1))
  sleep 0.3
done
[ "$checks" -ge 3 ] || fail "only $checks reads during the run found ibvcap_up 1"
[ "$first_update" != "$last_update" ] ||
  fail "the file was not rewritten during the run (update time stayed $first_update)"
say "$checks reads during the run passed promtool; rewritten from $first_update to $last_update"

finish "$SENDER" 30
expect_eq "sender exit code" "$RC" 0
finish "$CAPTURE" 30
expect_eq "capture exit code (0 = zero-loss)" "$RC" 0

R=$WORK/r.json
promtool_ok "$M" "at the end"
expect_eq "ibvcap_up at the end" "$(metric "$M" ibvcap_up)" 0
expect_eq "ibvcap_zero_loss at the end" "$(metric "$M" ibvcap_zero_loss)" 1
expect_eq "verdict" "$(j "$R" .verdict)" zero-loss
expect_eq "ibvcap_packets_total = totals.packets" "$(metric "$M" ibvcap_packets_total)" \
  "$(j "$R" .totals.packets)"
expect_eq "totals.packets" "$(j "$R" .totals.packets)" "$PACKETS"
expect_eq "ibvcap_bytes_total = totals.bytes" "$(metric "$M" ibvcap_bytes_total)" \
  "$(j "$R" .totals.bytes)"
# Per stream: every count of every stream equals the report's.
for key in packets:packets bytes:bytes missing:missing_frames duplicates:duplicate_frames \
  out_of_order:out_of_order_frames too_late:too_late_frames; do
  field=${key%%:*}
  family=ibvcap_stream_${key#*:}_total
  expected=$(jq -r --arg f "$field" '.streams[] | "\(.group) \(.antenna) \(.thread) \(.[$f])"' "$R" | sort)
  got=$(sed -n "s/^$family{run=\"ibvcap\",group=\"\([^\"]*\)\",antenna=\"\([^\"]*\)\",thread=\"\([^\"]*\)\"} /\1 \2 \3 /p" "$M" | sort)
  [ "$got" = "$expected" ] ||
    fail "$family differs from the report's streams[].$field: $got / $expected"
done
expect_eq "streams in the file" "$(grep -c '^ibvcap_stream_packets_total{run="ibvcap",' "$M")" 8
rejected=$(awk '/^ibvcap_rejected_frames_total\{/ { n += $2 } END { print n + 0 }' "$M")
expect_eq "ibvcap_rejected_frames_total = malformed + non_codif" "$rejected" \
  "$(($(j "$R" .totals.malformed) + $(j "$R" .totals.non_codif)))"
drops=$(awk '/^ibvcap_witness_total\{.*drop="true"/ { n += $2 } END { print n + 0 }' "$M")
expect_eq "drop witnesses = totals.nic_drops" "$drops" "$(j "$R" .totals.nic_drops)"
metric "$M" ibvcap_writer_backlog_bytes >/dev/null
expect_eq "report metrics_file.failures" "$(j "$R" .metrics_file.failures)" 0
[ "$(j "$R" .metrics_file.writes)" -ge 3 ] || fail "metrics_file.writes: $(j "$R" .metrics_file.writes)"
leftovers=$(find "$WORK/textfile" -mindepth 1 ! -name ibvcap.prom | wc -l)
expect_eq "temporary files left in the textfile directory" "$leftovers" 0
say "final file: promtool clean, up 0, zero-loss, totals and streams equal the report's"
pass
