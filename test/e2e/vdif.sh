#!/usr/bin/env bash
# e2e vdif (issue 28, "Done when"): live VDIF captures over the namespace
# testbed, the ledger equal to the generator's truth.
#
# 1. VTP, the rate given: `gen --send --vtp` (24 streams x 1000 frames at 400
#    frames per second, so 2.5 s of headers; loss, duplicates, reordering and
#    invalid frames 1% each, seed 7) to a capture of GROUP:PORT/vtp with
#    --vdif-frames-per-second 400. Asserts: exit 3, verdict loss, the truth
#    equal to gen -w's, the totals and every stream (format, station, thread,
#    packets, missing, duplicates, out_of_order, invalid, first, last) equal to
#    the truth, the sequence numbers' packets/missing/duplicates too, the rate
#    given (400) and nothing lost on the way in; the pcap written holds every
#    datagram, and `ibvcap read` of it gives the same streams.
# 2. VDIF, the rate learned: the same traffic as plain VDIF (seed 1) to a
#    capture of GROUP:PORT/vdif without a rate: the same assertions, and every
#    stream says "learned, confirmed" at 400 frames per second. (A seed whose
#    faults fall on the first second's last frame makes a stream learn 399:
#    docs/formats.md, "VDIF frame rates"; seed 1 has none there.)
# 3. scripts/demo.sh --vdif with this binary, on a testbed of its own name:
#    exit 0 and its line that the ledger reproduces the faults; and its
#    --compare, given a truth with one stream changed, exits 1 with MISMATCH
#    and the stream's two lines.
# About 15 s; 72,000 datagrams in all.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

MCAST=(239.17.0.1:36001 239.17.0.2:36001)
FPS=400
FAULTS=(--loss 0.01 --duplicate 0.01 --reorder 0.01 --invalid 0.01)

# vdif_streams_match REPORT TRUTH: totals and every stream equal, with the
# VTP sequence numbers' counts equal to the truth's frame counts.
vdif_streams_match() {
  local key f
  for key in packets missing duplicates out_of_order invalid; do
    expect_eq "totals.$key" "$(j "$1" ".totals.$key")" "$(j "$2" ".totals.$key")"
  done
  expect_eq "streams in the report" "$(j "$1" '.streams | length')" "$(j "$2" '.streams | length')"
  # shellcheck disable=SC2016 # jq's own $side
  f='[.streams[] | {format, group, antenna, station, thread, packets, missing, duplicates,
                    out_of_order, invalid, first, last,
                    psn: (if .format != "vtp" then null
                          elif $side == "truth" then {packets, missing, duplicates}
                          else .psn | {packets, missing, duplicates} end)}]
     | sort_by(.group, .antenna, .station, .thread)'
  if ! diff <(jq -S --arg side truth "$f" "$2") <(jq -S --arg side report "$f" "$1") \
    >"$WORK/streams.diff"; then
    fail "the report's streams differ from the truth: $(head -c 2000 "$WORK/streams.diff")"
  fi
}

# capture_round NAME FORMAT SEED CAPTURE_OPTION...: the traffic in FORMAT
# (vdif or vtp) sent live to a capture of GROUP:PORT/FORMAT with the options
# given; the report in $WORK/NAME.json, the pcap in $WORK/NAME/, the truth in
# $WORK/NAME-truth.json; asserts the ledger against the truth.
capture_round() {
  local name=$1 format=$2 seed=$3 r
  shift 3
  GEN=(--antennas 6 --threads 2 -c 1000 "--$format" --vdif-frames-per-second "$FPS"
    "${FAULTS[@]}" --seed "$seed")
  "$IBVCAP" gen -q -w "$WORK/$name-ref.pcap" --truth "$WORK/$name-ref-truth.json" \
    "${GEN[@]}" "${MCAST[@]}" || fail "ibvcap gen -w failed"
  PACKETS=$(j "$WORK/$name-ref-truth.json" .totals.packets)
  for key in missing duplicates out_of_order invalid; do
    [ "$(j "$WORK/$name-ref-truth.json" ".totals.$key")" -gt 0 ] ||
      fail "the $format truth has no $key: nothing would be tested"
  done
  say "$name: $PACKETS $format datagrams; truth: missing $(j "$WORK/$name-ref-truth.json" .totals.missing)," \
    "duplicates $(j "$WORK/$name-ref-truth.json" .totals.duplicates)," \
    "out of order $(j "$WORK/$name-ref-truth.json" .totals.out_of_order)," \
    "invalid $(j "$WORK/$name-ref-truth.json" .totals.invalid)"

  start "$name-capture.log" rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/$name" -F pcap \
    --report "$WORK/$name.json" -c "$PACKETS" --duration 60 "$@" "${MCAST[@]/%//$format}"
  local capture=$STARTED
  wait_for_join "$capture" 15 "${MCAST[@]}"
  say "$name: capture joined ${MCAST[*]} as /$format; sending at 25000 packets/s"
  send_traffic 60 --rate 25000 --truth "$WORK/$name-truth.json"
  finish "$capture" 30
  expect_eq "$name: capture exit code (3 = loss detected)" "$RC" 3
  diff <(jq -S . "$WORK/$name-truth.json") <(jq -S . "$WORK/$name-ref-truth.json") >/dev/null ||
    fail "$name: the live sender's truth differs from gen -w's for the same options and seed"

  r=$WORK/$name.json
  expect_eq "$name: verdict" "$(j "$r" .verdict)" loss
  expect_eq "$name: reconciled" "$(j "$r" .reconciled)" true
  for key in too_late malformed non_codif nic_drops write_drops implausible restarts; do
    expect_eq "$name: totals.$key" "$(j "$r" ".totals.$key")" 0
  done
  vdif_streams_match "$r" "$WORK/$name-truth.json"
  expect_eq "$name: streams of another format" \
    "$(jq --arg f "$format" '[.streams[] | select(.format != $f or .layout != "standard")] | length' "$r")" 0
  expect_eq "$name: streams at $FPS frames per second" \
    "$(jq --argjson n "$FPS" '[.streams[] | select(.frames_per_period == $n)] | length' "$r")" 24
  say "$name: ledger = truth: totals and all 24 streams$([ "$format" = vtp ] && echo ", sequence numbers included")"

  # The pcap holds every datagram, and reads back to the same streams.
  local pcap=$WORK/$name/ibvcap.pcap
  [ -s "$pcap" ] || fail "$name: no pcap written"
  tshark_clean "$pcap"
  expect_eq "$name: records in the pcap" "$(pcap_frames "$pcap")" "$PACKETS"
  local rc=0
  "$IBVCAP" read -q -r "$pcap" --report "$WORK/$name-reread.json" "$@" "${MCAST[@]/%//$format}" \
    >"$WORK/$name-reread.log" 2>&1 || rc=$?
  expect_eq "$name: exit code of ibvcap read of the capture's pcap" "$rc" 3
  vdif_streams_match "$WORK/$name-reread.json" "$WORK/$name-truth.json"
  say "$name: the pcap holds all $PACKETS datagrams and ibvcap read of it gives the same ledger"
}

testbed_up

capture_round vtp vtp 7 --vdif-frames-per-second "$FPS"
expect_eq "vtp: streams with the rate given" \
  "$(jq '[.streams[] | select(.rate == "given")] | length' "$WORK/vtp.json")" 24

capture_round vdif vdif 1
expect_eq "vdif: streams whose rate was learned and confirmed" \
  "$(jq '[.streams[] | select(.rate == "learned, confirmed")] | length' "$WORK/vdif.json")" 24
say "vdif: every stream learned $FPS frames per second from its first second and confirmed it"

# 3. The demo, on a testbed of the test's name (ours is taken down first; the
# cleanup removes whatever of it is left).
bash "$TESTBED" down "$TB" >/dev/null 2>&1 || fail "cannot remove testbed $TB before the demo"
rc=0
IBVCAP=$IBVCAP DEMO_TESTBED=$TB DEMO_DIR=$WORK/demo timeout 120 bash "$SRC/scripts/demo.sh" --vdif \
  >"$WORK/demo.log" 2>&1 || rc=$?
expect_eq "scripts/demo.sh --vdif exit code" "$rc" 0
grep -q '^demo: the ledger reproduces the injected faults exactly$' "$WORK/demo.log" ||
  fail "scripts/demo.sh --vdif did not say that the ledger reproduces the faults"
expect_eq "streams the demo compared" "$(grep -c '^  vdif 239\.17\.0\.[12]:36001 ' "$WORK/demo.log")" 24
grep -qx "== the run page (open it in any browser, offline): $WORK/demo/run.html" "$WORK/demo.log" ||
  fail "scripts/demo.sh --vdif did not print its run page's path"
grep -q '<!-- The ibvcap run page' "$WORK/demo/run.html" || fail "the demo's run page is not one"
say "scripts/demo.sh --vdif: ledger = truth, 24 streams; its run page written and named"

jq '.streams[3].missing += 1' "$WORK/demo/truth.json" >"$WORK/demo/changed-truth.json"
rc=0
bash "$SRC/scripts/demo.sh" --compare "$WORK/demo/report.json" "$WORK/demo/changed-truth.json" \
  >"$WORK/compare.log" 2>&1 || rc=$?
expect_eq "demo.sh --compare exit code on a changed truth" "$rc" 1
grep -q 'MISMATCH' "$WORK/compare.log" || fail "demo.sh --compare did not say MISMATCH"
expect_eq "stream lines demo.sh --compare printed as differing" "$(grep -c '^[<>] vdif ' "$WORK/compare.log")" 2
rc=0
bash "$SRC/scripts/demo.sh" --compare "$WORK/demo/report.json" "$WORK/demo/truth.json" \
  >"$WORK/compare-same.log" 2>&1 || rc=$?
expect_eq "demo.sh --compare exit code on the demo's own truth" "$rc" 0
say "demo.sh --compare: MISMATCH and exit 1 on one stream changed, exit 0 on the truth"
pass
