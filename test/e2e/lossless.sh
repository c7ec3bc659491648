#!/usr/bin/env bash
# e2e lossless: 24 live streams (6 antennas x 2 CODIF threads x 2 groups),
# 8334 frames each (200,016 packets) at 25,000 packets/s, sent by `ibvcap gen
# --send` in one namespace and captured by `ibvcap capture --source pcap` in the
# other. Asserts: exit 0, verdict zero-loss, every packet counted and every
# stream equal to the sender's truth, the .codif files byte-identical to what
# `ibvcap gen -w` + `ibvcap read` produce from the same options, and a pcap that
# tshark reads.
#
# Payload 1024 bytes (1130-byte frames), not the usual 8192: the capture writes
# codif + pcap, 56 MB/s at this rate instead of 414 MB/s, which a 2-core CI
# machine's disk and writer thread cannot sustain (the writer then drops and
# counts records: verdict loss). faults.sh and sigint.sh send 8298-byte frames.
# E2E_LOSSLESS_FRAMES / _RATE / _PAYLOAD change the defaults.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

PER_STREAM=${E2E_LOSSLESS_FRAMES:-8334}
RATE=${E2E_LOSSLESS_RATE:-25000}
PAYLOAD=${E2E_LOSSLESS_PAYLOAD:-1024}
CODIF_FRAME=$((64 + PAYLOAD))
MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 6 --threads 2 -c "$PER_STREAM" --payload "$PAYLOAD")

testbed_up

say "reference: ibvcap gen -w + ibvcap read -F codif with the same options"
gen_reference
read_reference 0
rm -f "$WORK/ref.pcap"
STREAMS=$(j "$WORK/ref-truth.json" '.streams | length')
expect_eq "reference streams" "$STREAMS" 24
say "$PACKETS packets of $((42 + CODIF_FRAME)) bytes in $STREAMS streams"

say "capture in $RX_NS on $RX_IF (-c $PACKETS, --duration 90 as a bound)"
start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out" -F codif -F pcap \
  --report "$WORK/r.json" -c "$PACKETS" --duration 90 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
say "capture joined ${MCAST[*]}"

say "send from $TX_NS at $RATE packets/s"
t_send=$(now_us)
send_traffic $((PACKETS / RATE + 60)) --rate "$RATE" --truth "$WORK/truth.json"
say "sender done in $(secs_since "$t_send") s"
finish "$CAPTURE" 30
expect_eq "capture exit code (0 = zero-loss)" "$RC" 0
say "capture ended (exit 0)"

diff <(jq -S . "$WORK/truth.json") <(jq -S . "$WORK/ref-truth.json") >/dev/null ||
  fail "the live sender's truth differs from gen -w's for the same options"
R=$WORK/r.json
expect_eq verdict "$(j "$R" .verdict)" zero-loss
expect_eq source "$(j "$R" .source)" pcap
expect_eq reconciled "$(j "$R" .reconciled)" true
expect_eq interrupted "$(j "$R" .interrupted)" false
expect_eq totals.packets "$(j "$R" .totals.packets)" "$PACKETS"
expect_eq totals.codif "$(j "$R" .totals.codif)" "$PACKETS"
for key in missing duplicates out_of_order too_late malformed non_codif nic_drops write_drops; do
  expect_eq "totals.$key" "$(j "$R" ".totals.$key")" 0
done
expect_eq "streams in the report" "$(j "$R" '.streams | length')" "$STREAMS"
streams_match "$R" "$WORK/truth.json"
say "report: zero-loss, $PACKETS packets, all $STREAMS streams equal the truth"

codif_match_reference "$WORK/out" 12
say "12 .codif files byte-identical to the reference"

tshark_clean "$WORK/out/ibvcap.pcap"
expect_eq "records in ibvcap.pcap" "$(pcap_frames "$WORK/out/ibvcap.pcap")" "$PACKETS"
outputs_match_files "$R"
say "tshark reads ibvcap.pcap ($PACKETS records); every output's counts match its file"
pass
