#!/usr/bin/env bash
# e2e dada: a live capture (--source pcap, in the testbed's namespaces) into a
# PSRDADA ring whose reader stalls, as a pipeline that falls behind: the
# capture never waits; the frames the ring had no room for are counted
# `consumer` in the report, the verdict, the timeline and the summary; the
# ring's data, read to its end of data, holds every other frame at its own
# place (the ordered file's payload, byte for byte) and a fill record for
# each frame counted `consumer`. The ring is made and read by test/dada_tool
# (psrdada's dada_db and dada_dbdisk are not in Debian; docs/operations.md
# records the same run against them by hand).
#
#   dada.sh IBVCAP_BINARY SOURCE_DIR DADA_TOOL
# shellcheck source-path=SCRIPTDIR source=lib.sh
DADA_TOOL=$(readlink -f "${3:?usage: dada.sh IBVCAP_BINARY SOURCE_DIR DADA_TOOL}")
source "$(dirname "$0")/lib.sh" "$1" "$2"

FRAMES=3000
RATE=1500
PAYLOAD=8192
MCAST=(239.17.0.1:36001)
GEN=(--antennas 1 --threads 1 -c "$FRAMES")
# A key of this run's own (hex), and the ring removed whatever way the test ends.
KEY=$(printf '%x' $((0x20000000 + ($$ % 4096) * 0x40000)))
trap 'rc=$?; "$DADA_TOOL" destroy "$KEY" >/dev/null 2>&1 || true; (exit $rc); cleanup' EXIT

testbed_up
"$DADA_TOOL" create "$KEY" 8 $((32 * PAYLOAD)) >/dev/null || fail "cannot make the ring $KEY"
say "ring $KEY: 8 blocks of 32 payloads ($((8 * 32)) frames, $((8 * 32 * PAYLOAD / 1000)) kB)"

# The pipeline: reads two blocks, stops for 1.5 s (~2,250 frames at $RATE/s), then reads on.
start reader.log "$DADA_TOOL" read "$KEY" "$WORK/ring.bin" 2 1500
READER=$STARTED

start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out" -F codif \
  --ordered --dada "$KEY" --dada-header SOURCE=e2e --report "$WORK/r.json" -c "$FRAMES" \
  --duration 60 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
say "capture joined; sending $FRAMES frames at $RATE/s"
send_traffic 60 --rate "$RATE"
finish "$CAPTURE" 30
expect_eq "capture exit code (3: the pipeline did not get every frame)" "$RC" 3
finish "$READER" 30
expect_eq "reader exit code (it read to the end of data)" "$RC" 0

R=$WORK/r.json
expect_eq totals.packets "$(j "$R" .totals.packets)" "$FRAMES"
expect_eq totals.missing "$(j "$R" .totals.missing)" 0
expect_eq "rings in the report" "$(j "$R" '.rings | length')" 1
CONSUMER=$(j "$R" '.rings[0].consumer')
RING_FRAMES=$(j "$R" '.rings[0].frames')
OWED=$(j "$R" '.rings[0].owed_at_end')
[ "$CONSUMER" -gt 0 ] || fail "the stalled reader cost no frame: consumer $CONSUMER"
expect_eq "ring frames + consumer" $((RING_FRAMES + CONSUMER)) "$FRAMES"
expect_eq totals.consumer_drops "$(j "$R" .totals.consumer_drops)" "$CONSUMER"
expect_eq lost_by_cause.consumer "$(j "$R" .lost_by_cause.consumer)" "$CONSUMER"
expect_eq "rings[0].end_of_data" "$(j "$R" '.rings[0].end_of_data')" true
j "$R" '.loss_reasons[]' | grep -q "the pipeline did not get" ||
  fail "no loss reason names the pipeline: $(j "$R" '.loss_reasons')"
grep -q "PSRDADA ring $KEY: .*$CONSUMER the pipeline did not get" "$WORK/capture.log" ||
  fail "the summary has no line for the ring: $(grep PSRDADA "$WORK/capture.log")"
say "report: $RING_FRAMES frames in the ring, $CONSUMER the pipeline did not get, $OWED still owed at the end"

grep -q '^SOURCE  *e2e$' "$WORK/ring.bin.hdr" || fail "the header lacks SOURCE e2e"
grep -q '^UTC_START ' "$WORK/ring.bin.hdr" || fail "the header lacks UTC_START"
ORDERED=$(find "$WORK/out" -name '*.codif')
read -r _ records _ ordered _ same _ fills _ consumer_fills _ other < <(
  "$DADA_TOOL" compare "$WORK/ring.bin" "$ORDERED" 64 "$PAYLOAD")
expect_eq "ring records" "$records" $((FRAMES - OWED))
expect_eq "ordered file records" "$ordered" "$FRAMES"
expect_eq "ring records equal to the ordered file's payload" "$same" "$RING_FRAMES"
expect_eq "fill records where the file has the frame" "$consumer_fills" $((CONSUMER - OWED))
expect_eq "fill records in both" "$fills" 0
expect_eq "records that are neither" "$other" 0
say "ring: $same payloads at their places, $consumer_fills fill records in place of the frames counted consumer"
pass
