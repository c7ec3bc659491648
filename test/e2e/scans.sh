#!/usr/bin/env bash
# e2e scans: one capture of a schedule of three scans (--schedule FILE with no
# --scan), set up once, each scan's frames judged by their own header times,
# which the senders set to the wall clock's (gen --start-seconds).
#
# The scans are a, b and c, 0.75 s each, 3 s apart, from S + 0.5 s. Before
# each scan (and after the capture has moved onto it, at the last one's stop
# and grace), two antennas send 2 s of frames (1000 a second) around its
# window; in scan b a third antenna starts 0.3 s late. Then:
#  - every stream's file in DIR/a, DIR/b, DIR/c holds exactly that scan's
#    frames, first and last at the window's edges (750 frames);
#  - each scan has its own report, ledger and verdict: a and c zero loss, b
#    loss (the late stream's 300 frames before its first), exit code 3;
#  - the capture's report lists the three scans and the frames between them;
#  - one process, one set of joins: the capture was set up once.
# Then a schedule refused whole: scans closer than the grace and set-up need.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

PAYLOAD=256
CODIF_FRAME=$((64 + PAYLOAD))
MCAST=(239.17.0.1:36001)
EPOCH52=1767225600 # gen's default epoch 52: 2026-01-01T00:00:00Z
utc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S; }

# first_last FILE: "FRAME SECONDS FRAME SECONDS" of a .codif file's first and
# last record (CODIF v2 word 0: the frame number, then the seconds).
first_last() {
  local size n
  size=$(stat -c %s "$1")
  n=$((size / CODIF_FRAME))
  [ "$n" -gt 0 ] || fail "$1 holds no frame"
  echo "$(od -An -tu4 -N8 "$1") $(od -An -tu4 -j $(((n - 1) * CODIF_FRAME)) -N8 "$1")" | xargs
}

# sleep_until UNIX_SECONDS (may have a fraction)
sleep_until() {
  local left
  left=$(awk -v t="$1" -v n="${EPOCHREALTIME}" 'BEGIN { d = t - n; print (d > 0 ? d : 0) }')
  sleep "$left"
}

testbed_up

NOW=$(date +%s)
S=$((NOW + 3 - EPOCH52)) # scan a's frames' first second
W0=$((EPOCH52 + S))      # its wall-clock time
GRACE=0.5
cat >"$WORK/schedule" <<EOF
# name  start                        stop
a       $(utc "$W0").5Z     $(utc $((W0 + 1))).25Z
b       $(utc $((W0 + 3))).5Z  $(utc $((W0 + 4))).25Z
c       $(utc $((W0 + 6))).5Z  $(utc $((W0 + 7))).25Z
EOF
say "schedule: $(tr '\n' ';' <"$WORK/schedule")"

start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out" -F codif \
  --report "$WORK/capture.json" --schedule "$WORK/schedule" --window-grace "$GRACE" "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
wait_for_text "$WORK/capture.log" "set up; writing the frames of $(utc "$W0").5Z" 5
say "capture joined, waiting for scan a"

# Each scan's frames are sent once the capture has moved onto it: at the last
# scan's stop and grace, plus a margin.
for k in 0 1 2; do
  SK=$((S + 3 * k))
  if [ "$k" -gt 0 ]; then
    sleep_until "$(awk -v t=$((W0 + 3 * k - 3 + 1)) -v g="$GRACE" 'BEGIN { print t + 0.25 + g + 0.3 }')"
    wait_for_text "$WORK/capture.log" "set up; writing the frames of $(utc $((W0 + 3 * k))).5Z" 5
  fi
  GEN=(--antennas 2 --threads 1 -c 2000 --payload "$PAYLOAD" --start-seconds "$SK")
  send_traffic 30 --rate 8000
  if [ "$k" = 1 ]; then
    GEN=(--antenna 10.0.0.13 --threads 1 -c 1200 --start-frame 800 --payload "$PAYLOAD" --start-seconds "$SK")
    send_traffic 30 --rate 8000
  fi
  say "scan $k's frames sent (seconds $SK and $((SK + 1)))"
done
finish "$CAPTURE" 20
expect_eq "capture exit code (3: scan b lost its late stream's head)" "$RC" 3

C=$WORK/capture.json
expect_eq "scans in the capture's report" "$(j "$C" '[.scans[].scan] | join(",")')" a,b,c
expect_eq "verdicts" "$(j "$C" '[.scans[].verdict] | join(",")')" zero-loss,loss,zero-loss
expect_eq "capture verdict" "$(j "$C" .verdict)" loss
expect_eq "capture stopped_by" "$(j "$C" .stopped_by)" window_end
expect_eq "not recorded" "$(j "$C" '.not_recorded | length')" 0
# Outside the windows: per antenna 500 before and 750 after each window; the
# late antenna's 1200 frames from (S+3, 800) hold 450 in b's window, 750 after.
expect_eq "frames outside the scans" "$(j "$C" .outside_scans)" $((3 * 2 * 1250 + 750))

for k in 0 1 2; do
  name=$(printf '%s' abc | cut -c $((k + 1)))
  SK=$((S + 3 * k))
  R=$WORK/out/$name/report.json
  expect_eq "scan $name's report path" "$(j "$C" ".scans[$k].report")" "$R"
  expect_eq "scan $name window.scan" "$(j "$R" .window.scan)" "$name"
  expect_eq "scan $name stopped_by" "$(j "$R" .stopped_by)" window_end
  expect_eq "scan $name saw_end" "$(j "$R" .window.saw_end)" true
  expect_eq "scan $name reconciled" "$(j "$R" .reconciled)" true
  for a in 10.0.0.11 10.0.0.12; do
    sel=".streams[] | select(.antenna == \"$a\")"
    expect_eq "$name $a packets" "$(j "$R" "$sel | .packets")" 750
    expect_eq "$name $a missing" "$(j "$R" "$sel | .missing")" 0
    f=$(j "$R" ".outputs[] | select(.antenna == \"$a\") | .path")
    case $f in "$WORK/out/$name/"*) ;; *) fail "scan $name's file $f is not in $WORK/out/$name" ;; esac
    expect_eq "$name $a file's first and last frame" "$(first_last "$f")" "500 $SK 249 $((SK + 1))"
    expect_eq "$name $a file's frames" $(($(stat -c %s "$f") / CODIF_FRAME)) 750
  done
done
R=$WORK/out/b/report.json
sel='.streams[] | select(.antenna == "10.0.0.13")'
expect_eq "b: late stream missing_before_first" "$(j "$R" "$sel | .window.missing_before_first")" 300
f=$(j "$R" '.outputs[] | select(.antenna == "10.0.0.13") | .path')
expect_eq "b: late stream file's first and last frame" "$(first_last "$f")" "800 $((S + 3)) 249 $((S + 4))"
expect_eq "streams in a" "$(j "$WORK/out/a/report.json" '.streams | length')" 2
expect_eq "streams in c" "$(j "$WORK/out/c/report.json" '.streams | length')" 2
grep -q "3 of 3 scans recorded (window_end), 2 without loss; set up once" "$WORK/capture.log" ||
  fail "no closing line: $(tail -c 1500 "$WORK/capture.log")"
say "three scans in one capture: each stream's file exactly its window's frames; b's late head is loss"

# --- a schedule too tight for one capture: refused whole, naming the line ---
NOW=$(date +%s)
cat >"$WORK/tight" <<EOF
x $(utc $((NOW + 60)))Z $(utc $((NOW + 70)))Z
y $(utc $((NOW + 71)))Z $(utc $((NOW + 80)))Z
EOF
RC=0
rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out3" -F codif \
  --schedule "$WORK/tight" "${MCAST[@]}" >"$WORK/tight.log" 2>&1 || RC=$?
expect_eq "tight schedule exit code" "$RC" 2
grep -q "line 2: scan y starts 1.000 s after scan x stops; one capture needs 3 s between scans" "$WORK/tight.log" ||
  fail "the tight schedule was not refused with its line: $(cat "$WORK/tight.log")"
[ ! -e "$WORK/out3" ] || fail "a refused schedule left $WORK/out3"
say "a schedule too tight for one capture is refused with its line"
pass
