#!/usr/bin/env bash
# e2e faults: the live sender injects loss, duplicates and reordering (1% each,
# seed 7) into 24 streams x 1000 frames; the live capture's ledger must count
# exactly the injected faults. Asserts: exit 3, verdict loss, totals and every
# stream's packets/missing/duplicates/out_of_order/first/last equal the truth,
# and the .codif files equal gen -w + read's for the same options (the faults
# arrive in the order they were sent).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 6 --threads 2 -c 1000 --loss 0.01 --duplicate 0.01 --reorder 0.01 --seed 7)

testbed_up

say "reference: ibvcap gen -w + ibvcap read -F codif with the same options"
gen_reference
read_reference 3
say "truth: $PACKETS packets; missing $(j "$WORK/ref-truth.json" .totals.missing)," \
  "duplicates $(j "$WORK/ref-truth.json" .totals.duplicates)," \
  "out of order $(j "$WORK/ref-truth.json" .totals.out_of_order)"
for key in missing duplicates out_of_order; do
  [ "$(j "$WORK/ref-truth.json" ".totals.$key")" -gt 0 ] || fail "the truth has no $key: nothing would be tested"
done

start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out" -F codif \
  --report "$WORK/r.json" -c "$PACKETS" --duration 60 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
say "capture joined ${MCAST[*]}; sending at 25000 packets/s"
send_traffic 60 --rate 25000 --truth "$WORK/truth.json"
finish "$CAPTURE" 30
expect_eq "capture exit code (3 = loss detected)" "$RC" 3

diff <(jq -S . "$WORK/truth.json") <(jq -S . "$WORK/ref-truth.json") >/dev/null ||
  fail "the live sender's truth differs from gen -w's for the same options and seed"
R=$WORK/r.json
expect_eq verdict "$(j "$R" .verdict)" loss
expect_eq source "$(j "$R" .source)" pcap
expect_eq reconciled "$(j "$R" .reconciled)" true
for key in packets missing duplicates out_of_order; do
  expect_eq "totals.$key" "$(j "$R" ".totals.$key")" "$(j "$WORK/truth.json" ".totals.$key")"
done
for key in too_late malformed non_codif nic_drops write_drops; do
  expect_eq "totals.$key" "$(j "$R" ".totals.$key")" 0
done
expect_eq "streams in the report" "$(j "$R" '.streams | length')" "$(j "$WORK/truth.json" '.streams | length')"
streams_match "$R" "$WORK/truth.json"
say "ledger = truth: totals and all 24 streams (packets, missing, duplicates, out_of_order, first, last)"

codif_match_reference "$WORK/out" 12
say "12 .codif files byte-identical to the reference, faults included"
pass
