#!/usr/bin/env bash
# e2e sigint: Ctrl-C in the middle of a live stream.
# 1. One SIGINT: the capture stops within 5 s with exit 0 or 3 (matching its
#    verdict), the report says interrupted, its groups are left, tshark reads the
#    pcap, every .codif file is whole frames, and each output's packet count in
#    the report equals the frames in its file.
# 2. Two SIGINTs in quick succession: the process stops at once (exit 130):
#    the writers drop what is queued but finish the write in progress, so the
#    files are still valid (tshark reads the pcap, .codif files are whole
#    frames), and the report says what the files hold and how many records
#    were not written.
#    Both runs also write -F pcapng: it still ends with its interface
#    statistics block, which capinfos finds under the capture's interface.
# The sender (2000 packets/s) must stop within 5 s of its own SIGINT.
# The live stats line: run 1 (no -q, over 2 s) prints it once a second on
# stderr, counting the traffic, and never on stdout; run 2 (-q) prints none.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

MCAST=(239.17.0.1:36001 239.17.0.2:36001)
SEND=(--antennas 6 --threads 2 -c 1000 --rate 2000)

testbed_up

# capture_and_send N S [OPTION...]: a capture (outputs in $WORK/outN, report
# rN.json, stdout in captureN.log, stderr in captureN.err.log) joined and
# receiving from a slow sender for S seconds; pids in CAPTURE and SENDER.
capture_and_send() {
  ERR_LOG="capture$1.err.log" start "capture$1.log" rx "$IBVCAP" capture --source pcap \
    -i "$RX_IF" -o "$WORK/out$1" -F codif -F pcap -F pcapng --report "$WORK/r$1.json" --duration 120 \
    "${@:3}" "${MCAST[@]}"
  CAPTURE=$STARTED
  wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
  start "send$1.log" tx "$IBVCAP" gen --send -i "$TX_IF" "${SEND[@]}" "${MCAST[@]}"
  SENDER=$STARTED
  sleep "$2"
  kill -0 "$SENDER" 2>/dev/null || fail "the sender ended within $2 s; it should take 12 s"
  kill -0 "$CAPTURE" 2>/dev/null || fail "the capture ended before the SIGINT"
}

# pcapng_closed DIR: DIR/ibvcap.pcapng is read by tshark, and capinfos finds
# one interface, the capture's, with its statistics block (written at close).
pcapng_closed() {
  local f=$1/ibvcap.pcapng info
  tshark_clean "$f"
  info=$(capinfos "$f")
  for want in "Number of interfaces in file: 1" "Name = $RX_IF" \
    "Description = ibvcap capture, pcap source" "Number of stat entries = 1"; do
    grep -qF "$want" <<<"$info" || fail "capinfos $f lacks '$want': $info"
  done
}

stop_sender() {
  kill -INT "$SENDER"
  finish "$SENDER" 5
  say "sender stopped $WAITED s after its SIGINT (exit $RC)"
}

say "run 1: one SIGINT mid-stream"
capture_and_send 1 2
kill -INT "$CAPTURE"
finish "$CAPTURE" 5
case $RC in 0 | 3) ;; *) fail "capture exit code after one SIGINT: $RC (expected 0 or 3)" ;; esac
say "capture ended $WAITED s after SIGINT with exit $RC"
stop_sender
R=$WORK/r1.json
[ -e "$R" ] || fail "no report after one SIGINT"
expect_eq interrupted "$(j "$R" .interrupted)" true
expect_eq reconciled "$(j "$R" .reconciled)" true
if [ "$RC" = 0 ]; then verdict=zero-loss; else verdict=loss; fi
expect_eq "verdict for exit $RC" "$(j "$R" .verdict)" "$verdict"
packets=$(j "$R" .totals.packets)
[ "$packets" -gt 1000 ] || fail "only $packets packets in 2 s at 2000 packets/s"
expect_eq "pcap output packets = totals.packets" "$(j "$R" '.outputs[] | select(.format == "pcap") | .packets')" "$packets"
expect_eq "codif output packets = totals.codif" "$(j "$R" '[.outputs[] | select(.format == "codif") | .packets] | add')" "$(j "$R" .totals.codif)"
left=$(rx cat /proc/net/igmp)
for g in "${MCAST[@]}"; do
  ! grep -q "$(igmp_hex "${g%%:*}")" <<<"$left" || fail "group ${g%%:*} still joined after the capture ended"
done
tshark_clean "$WORK/out1/ibvcap.pcap"
files=$(codif_whole "$WORK/out1")
expect_eq "codif files" "$files" 12
outputs_match_files "$R"
pcapng_closed "$WORK/out1"
say "interrupted: true; $packets packets; groups left; tshark reads the pcap and pcapng; $files codif files whole; outputs' counts = files"
# "ibvcap stats: 12:00:03  2,000 pkt/s  0.13 Gb/s  drops 0  slots held -  writer backlog 0.0 MiB"
STATS='^ibvcap stats: [0-9]{2}:[0-9]{2}:[0-9]{2}  [0-9,]+ pkt/s  [0-9]+\.[0-9]{2} Gb/s  drops [0-9,]+  slots held -  writer backlog [0-9]+\.[0-9] MiB$'
lines=$(grep -Ec "$STATS" "$WORK/capture1.err.log" || true)
[ "$lines" -ge 1 ] || fail "no stats line on stderr in a capture of over 2 s without -q" \
  "(stderr: $(head -c 500 "$WORK/capture1.err.log"))"
! grep -q 'ibvcap stats:' "$WORK/capture1.log" || fail "a stats line on stdout (it belongs on stderr)"
busy=$(grep -E "$STATS" "$WORK/capture1.err.log" | grep -Ev '  0 pkt/s  ' || true)
[ -n "$busy" ] ||
  fail "no stats line counted the 2000 packets/s: $(grep -E "$STATS" "$WORK/capture1.err.log" | tr '\n' '|')"
say "stats line on stderr once a second ($lines lines), e.g. ${busy%%$'\n'*}"

say "run 2: two SIGINTs in quick succession (and -q: no stats line)"
# 4 s: long enough for the writer to have handed whole buffers to every file.
capture_and_send 2 4 -q
# Two signals sent back to back merge into one while the first is still
# pending (POSIX does not queue them): send the second once the first has been
# delivered, as a hand pressing Ctrl-C twice would.
kill -INT "$CAPTURE"
for _ in $(seq 1000); do
  pending=$(awk '/^(SigPnd|ShdPnd):/ { print $2 }' "/proc/$CAPTURE/status" 2>/dev/null | tr '\n' ' ')
  [ -n "$pending" ] || break
  delivered=1
  for p in $pending; do (((16#$p & 2) == 0)) || delivered=0; done
  [ "$delivered" = 1 ] && break
  sleep 0.001
done
kill -INT "$CAPTURE" 2>/dev/null || fail "the capture ended on the first SIGINT before the second was sent"
finish "$CAPTURE" 3
expect_eq "capture exit code after two SIGINTs" "$RC" 130
say "capture ended $WAITED s after the SIGINTs with exit 130"
stop_sender
[ -e "$WORK/r2.json" ] || fail "no report after two SIGINTs (the counts must still be reported)"
[ -e "$WORK/out2/ibvcap.pcap" ] || fail "no pcap after 2 s of traffic and two SIGINTs"
tshark_clean "$WORK/out2/ibvcap.pcap"
files=$(codif_whole "$WORK/out2")
outputs_match_files "$WORK/r2.json"
pcapng_closed "$WORK/out2"
expect_eq "interrupted after two SIGINTs" "$(jq .interrupted "$WORK/r2.json")" true
! grep -q 'ibvcap stats:' "$WORK/capture2.err.log" "$WORK/capture2.log" ||
  fail "a stats line with -q: $(grep -h 'ibvcap stats:' "$WORK/capture2.err.log" "$WORK/capture2.log" | head -1)"
say "report: $(jq .totals.write_drops "$WORK/r2.json") queued records not written; tshark reads the pcap ($(pcap_frames "$WORK/out2/ibvcap.pcap") records); $files codif files whole; outputs' counts = files"
pass
