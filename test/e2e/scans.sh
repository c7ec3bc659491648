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
# A second capture of the same schedule beside it, and `ibvcap merge` of the
# two: each scan's verdict over both hosts, which agree on every window.
# Then the control socket (capture --control, ibvcap ctl) drives three scans
# of a capture that stays up idle between them: each its own directory,
# report and verdict; frames while idle counted, not written.
# Then SIGHUP reads the schedule again: a file with a bad line is refused
# whole (the scans to come as they were), a good one adds a scan, recorded.
# Then a SIGINT mid-scan: that scan's report says sigint, the rest are listed
# as not recorded. Then a schedule refused whole: scans closer than the grace
# and set-up need.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

PAYLOAD=256
CODIF_FRAME=$((64 + PAYLOAD))
MCAST=(239.17.0.1:36001)

# sleep_until UNIX_SECONDS (may have a fraction)
sleep_until() {
  local left
  left=$(awk -v t="$1" -v n="${EPOCHREALTIME}" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')
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
# A second host given the same schedule (here a second capture beside the
# first): its reports merge with the first's, scan by scan.
start capture2.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/host2" -F codif \
  --report "$WORK/host2/{scan}.json" --schedule "$WORK/schedule" --window-grace "$GRACE" "${MCAST[@]}"
CAPTURE2=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
wait_for_text "$WORK/capture.log" "set up; writing the frames of $(utc "$W0").5Z" 5
wait_for_text "$WORK/capture2.log" "set up; writing the frames of $(utc "$W0").5Z" 5
say "capture joined, waiting for scan a"

# Each scan's frames are sent once the capture has moved onto it: at the last
# scan's stop and grace, plus a margin.
for k in 0 1 2; do
  SK=$((S + 3 * k))
  if [ "$k" -gt 0 ]; then
    # (printf: awk's print would write a time this large as 1.76444e+09)
    sleep_until "$(awk -v t=$((W0 + 3 * k - 3 + 1)) -v g="$GRACE" 'BEGIN { printf "%.3f", t + 0.25 + g + 0.3 }')"
    wait_for_text "$WORK/capture.log" "set up; writing the frames of $(utc $((W0 + 3 * k))).5Z" 5
    wait_for_text "$WORK/capture2.log" "set up; writing the frames of $(utc $((W0 + 3 * k))).5Z" 5
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
finish "$CAPTURE2" 10
expect_eq "second capture's exit code" "$RC" 3

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
  # The kernel's counter is the scan's share: what it offered during the scan.
  expect_eq "scan $name pcap/ps_recv" "$(j "$R" '[.source_counters[] | select(.name == "pcap/ps_recv")][0].value')" \
    "$(j "$R" .totals.packets)"
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
grep -q "3 scans recorded (window_end), 2 without loss, 0 not recorded; set up once" "$WORK/capture.log" ||
  fail "no closing line: $(tail -c 1500 "$WORK/capture.log")"
say "three scans in one capture: each stream's file exactly its window's frames; b's late head is loss"

# merge of the two captures of the schedule: each scan's verdict over both.
RC=0
"$IBVCAP" merge "$WORK"/out/{a,b,c}/report.json "$WORK"/host2/{a,b,c}.json \
  --report "$WORK/merged.json" >"$WORK/merge.log" 2>&1 || RC=$?
expect_eq "merge exit code" "$RC" 3
M=$WORK/merged.json
expect_eq "merged scans" "$(j "$M" '[.scans[].scan] | join(",")')" a,b,c
expect_eq "merged verdicts" "$(j "$M" '[.scans[].verdict] | join(",")')" zero-loss,loss,zero-loss
expect_eq "hosts agree on every scan" "$(j "$M" '[.scans[].merged.window.hosts_agree] | all')" true
expect_eq "reports per scan" "$(j "$M" '[.scans[].reports | length] | join(",")')" 2,2,2
say "merge of two captures of the schedule: each scan's verdict, the hosts agree"

# --- the control socket drives three scans ----------------------------------
CTL=$WORK/ctl.sock
start control.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/ctlout" -F codif \
  --report "$WORK/ctl.json" --control "$CTL" "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
wait_for_file "$CTL" 5
expect_eq "socket mode" "$(stat -c %a "$CTL")" 660
ctl() { rx "$IBVCAP" ctl "$CTL" "$@"; }
expect_eq "status while idle" "$(ctl status | cut -d, -f1)" "ok idle"
RC=0
ctl stop >"$WORK/ctl.out" 2>&1 || RC=$?
expect_eq "stop with no scan: exit code" "$RC" 1
grep -q "error: no scan is under way" "$WORK/ctl.out" || fail "stop while idle: $(cat "$WORK/ctl.out")"
# A telescope's streams: two antennas paced at their frame rate (1000 frames
# a second each), every frame stamped with the wall clock's time as it is sent
# (a frame is never sent before its time), for 12 s (the three scans take 3 s
# here, several under ASan); the scans are started and stopped while they flow.
NOW_MS=$(date +%s%3N)
GEN=(--antennas 2 --threads 1 -c 12000 --payload "$PAYLOAD" --start-seconds $((NOW_MS / 1000 - EPOCH52))
  --start-frame $((NOW_MS % 1000)))
start send.log tx "$IBVCAP" gen --send -i "$TX_IF" --rate 2000 "${GEN[@]}" "${MCAST[@]}"
SENDER=$STARTED
for k in 1 2 3; do
  ctl start "s$k" >"$WORK/ctl.out" || fail "start s$k: $(cat "$WORK/ctl.out")"
  wait_for_text "$WORK/control.log" "scan s$k started on request" 5
  RC=0
  ctl start other >"$WORK/ctl.out" 2>&1 || RC=$?
  expect_eq "a start while s$k is under way: exit code" "$RC" 1
  grep -q "error: scan s$k is under way: stop it first" "$WORK/ctl.out" ||
    fail "start while s$k is under way: $(cat "$WORK/ctl.out")"
  expect_eq "status of s$k" "$(ctl status | cut -d' ' -f1-3)" "ok scan s$k"
  sleep 0.5
  ctl stop >"$WORK/ctl.out" || fail "stop s$k: $(cat "$WORK/ctl.out")"
  wait_for_text "$WORK/control.log" "== scan s$k ended (control)" 5
  sleep 0.3 # idle: frames counted, written nowhere
done
finish "$SENDER" 40
expect_eq "sender exit code" "$RC" 0
sleep 0.3 # (the last frames through the ring)
kill -INT "$CAPTURE"
finish "$CAPTURE" 10
expect_eq "controlled capture's exit code" "$RC" 0
C=$WORK/ctl.json
expect_eq "controlled scans" "$(j "$C" '[.scans[].scan] | join(",")')" s1,s2,s3
expect_eq "controlled verdicts" "$(j "$C" '[.scans[].verdict] | join(",")')" zero-loss,zero-loss,zero-loss
expect_eq "controlled stopped_by" "$(j "$C" '[.scans[].stopped_by] | join(",")')" control,control,control
# Every frame sent is a scan's (in its window or not) or came while idle.
expect_eq "frames counted once" "$(($(j "$C" '[.scans[].packets] | add') + $(j "$C" .between_scans_idle)))" 24000
[ "$(j "$C" .between_scans_idle)" -gt 0 ] || fail "no frame came while idle: $(j "$C" .)"
for k in 1 2 3; do
  R=$WORK/ctlout/s$k/report.json
  for a in 10.0.0.11 10.0.0.12; do
    sel=".streams[] | select(.antenna == \"$a\")"
    n=$(j "$R" "$sel | .packets")
    [ "$n" -gt 100 ] || fail "s$k $a: $n frames in a scan of 0.5 s"
    expect_eq "s$k $a missing" "$(j "$R" "$sel | .missing")" 0
    f=$(j "$R" ".outputs[] | select(.antenna == \"$a\") | .path")
    expect_eq "s$k $a file's frames" $(($(stat -c %s "$f") / CODIF_FRAME)) "$n"
  done
done
[ ! -e "$CTL" ] || fail "the control socket $CTL was left behind"
say "the control socket drove three scans, each its own directory, report and verdict"

# --- SIGHUP reads the schedule again -----------------------------------------
NOW=$(date +%s)
S=$((NOW + 3 - EPOCH52))
W0=$((EPOCH52 + S))
echo "r1 $(utc "$W0").5Z $(utc $((W0 + 1))).25Z" >"$WORK/sighup.sched"
start sighup.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/hup" -F codif \
  --report "$WORK/hup.json" --schedule "$WORK/sighup.sched" --window-grace "$GRACE" "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
wait_for_text "$WORK/sighup.log" "set up; writing the frames of $(utc "$W0").5Z" 5
# A file with a bad line: refused whole, the scans to come as they were.
printf 'r1 %s.5Z %s.25Z\nr2 %s.5Z soon\n' "$(utc "$W0")" "$(utc $((W0 + 1)))" "$(utc $((W0 + 3)))" >"$WORK/sighup.sched"
kill -HUP "$CAPTURE"
wait_for_text "$WORK/sighup.log" "the schedule was not read again: schedule $WORK/sighup.sched line 2: bad time 'soon'" 5
# Then a good one: r1 goes on, r2 is to come.
printf 'r1 %s.5Z %s.25Z\nr2 %s.5Z %s.25Z\n' "$(utc "$W0")" "$(utc $((W0 + 1)))" "$(utc $((W0 + 3)))" \
  "$(utc $((W0 + 4)))" >"$WORK/sighup.sched"
kill -HUP "$CAPTURE"
wait_for_text "$WORK/sighup.log" "the schedule was read again: 1 scan to come, the next r2 at $(utc $((W0 + 3))).5Z" 5
GEN=(--antennas 2 --threads 1 -c 2000 --payload "$PAYLOAD" --start-seconds "$S")
send_traffic 30 --rate 8000
wait_for_text "$WORK/sighup.log" "set up; writing the frames of $(utc $((W0 + 3))).5Z" 10
GEN=(--antennas 2 --threads 1 -c 2000 --payload "$PAYLOAD" --start-seconds $((S + 3)))
send_traffic 30 --rate 8000
finish "$CAPTURE" 20
expect_eq "re-read capture's exit code" "$RC" 0
expect_eq "re-read capture's scans" "$(j "$WORK/hup.json" '[.scans[].scan] | join(",")')" r1,r2
for k in 1 2; do
  R=$WORK/hup/r$k/report.json
  expect_eq "r$k packets" "$(j "$R" .totals.codif)" 1500
  f=$(j "$R" '.outputs[] | select(.antenna == "10.0.0.11") | .path')
  expect_eq "r$k file's first and last frame" "$(first_last "$f")" "500 $((S + 3 * k - 3)) 249 $((S + 3 * k - 2))"
done
expect_eq "r1's notes of the re-reads" "$(j "$WORK/hup/r1/report.json" '[.notes[] | select(startswith("the schedule was"))] | length')" 2
say "SIGHUP: a bad schedule refused whole, a good one's new scan recorded"

# --- a stop of the whole capture mid-scan -----------------------------------
NOW=$(date +%s)
printf 'm1 %sZ %sZ\nm2 %sZ %sZ\n' "$(utc $((NOW + 3)))" "$(utc $((NOW + 60)))" "$(utc $((NOW + 70)))" \
  "$(utc $((NOW + 80)))" >"$WORK/mid.sched"
start mid.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/mid" -F codif \
  --report "$WORK/mid.json" --schedule "$WORK/mid.sched" "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_text "$WORK/mid.log" "the frames of $(utc $((NOW + 3)))Z" 10
GEN=(--antennas 1 --threads 1 -c 100 --payload "$PAYLOAD" --start-seconds $((NOW + 3 - EPOCH52)))
send_traffic 30 --rate 8000
sleep 0.3
kill -INT "$CAPTURE"
finish "$CAPTURE" 10
expect_eq "stopped mid-scan: exit code" "$RC" 0
expect_eq "m1 stopped_by" "$(j "$WORK/mid/m1/report.json" .stopped_by)" sigint
expect_eq "m1 saw_end" "$(j "$WORK/mid/m1/report.json" .window.saw_end)" false
expect_eq "m1 frames" "$(j "$WORK/mid/m1/report.json" .totals.codif)" 100
expect_eq "not recorded" "$(j "$WORK/mid.json" '.not_recorded | join(",")')" m2
say "a stop mid-scan ends that scan's report with the signal; the scans to come are listed"

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
