#!/usr/bin/env bash
# e2e window: a frame window (--start-at, --stop-at) on a live capture, judged
# by the frames' own header times, which the senders set to the wall clock's
# (gen --start-seconds), as a telescope's are.
#
# 1. The capture is set up and joined seconds before the window. Two antennas
#    send 3 s of frames (1000 a second) from S; a third starts 0.8 s late.
#    The window is [S + 0.5 s, S + 2.25 s): each full stream's file holds
#    exactly frames (S, 500) to (S+2, 249), 1750 of them; the late stream's
#    first is (S, 800) and the 300 frames before it are loss (exit 3), said
#    in the verdict; the frames outside are counted before_window and
#    after_window; the run ends by itself at the stop and its grace.
# 2. A capture stopped by SIGINT mid-window: its report says so, counts no
#    missing frames after the streams' last (the window's end was not seen).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

PAYLOAD=256
CODIF_FRAME=$((64 + PAYLOAD))
MCAST=(239.17.0.1:36001)

testbed_up

# --- 1. a window with a late stream ---------------------------------------
NOW=$(date +%s)
S=$((NOW + 6 - EPOCH52)) # the frames' first second: 6 s from now (set-up and sending take less)
START="$(utc $((EPOCH52 + S))).5Z"
STOP="$(utc $((EPOCH52 + S + 2))).25Z"
say "window [$START, $STOP); frames from $(utc $((EPOCH52 + S)))Z"
start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out" -F codif \
  --report "$WORK/r.json" --start-at "$START" --stop-at "$STOP" --window-grace 1 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
# The line comes after the joins (the set-up's last step), so wait for it.
wait_for_text "$WORK/capture.log" "set up; writing the frames of $START to $STOP" 5
say "capture joined and waiting for the window"

GEN=(--antennas 2 --threads 1 -c 3000 --payload "$PAYLOAD" --start-seconds "$S")
send_traffic 30 --rate 8000
GEN=(--antenna 10.0.0.13 --threads 1 -c 2200 --start-frame 800 --payload "$PAYLOAD" --start-seconds "$S")
send_traffic 30 --rate 8000
say "sent; the window ends at $STOP"
finish "$CAPTURE" 20
expect_eq "capture exit code (3: the late stream's frames are loss)" "$RC" 3
R=$WORK/r.json
expect_eq stopped_by "$(j "$R" .stopped_by)" window_end
expect_eq window.saw_end "$(j "$R" .window.saw_end)" true
expect_eq reconciled "$(j "$R" .reconciled)" true
expect_eq before_window "$(j "$R" .reasons.non_codif.before_window)" 1000
expect_eq after_window "$(j "$R" .reasons.non_codif.after_window)" 2250
expect_eq "streams" "$(j "$R" '.streams | length')" 3
for a in 10.0.0.11 10.0.0.12; do
  sel=".streams[] | select(.antenna == \"$a\")"
  expect_eq "$a packets" "$(j "$R" "$sel | .packets")" 1750
  expect_eq "$a missing" "$(j "$R" "$sel | .missing")" 0
  expect_eq "$a first" "$(j "$R" "$sel | \"\(.first.seconds) \(.first.frame)\"")" "$S 500"
  expect_eq "$a last" "$(j "$R" "$sel | \"\(.last.seconds) \(.last.frame)\"")" "$((S + 2)) 249"
  f=$(j "$R" ".outputs[] | select(.antenna == \"$a\") | .path")
  expect_eq "$a file's first and last frame" "$(first_last "$f")" "500 $S 249 $((S + 2))"
  expect_eq "$a file's frames" $(($(stat -c %s "$f") / CODIF_FRAME)) 1750
done
sel='.streams[] | select(.antenna == "10.0.0.13")'
expect_eq "late stream packets" "$(j "$R" "$sel | .packets")" 1450
expect_eq "late stream missing" "$(j "$R" "$sel | .missing")" 300
expect_eq "late stream missing_before_first" "$(j "$R" "$sel | .window.missing_before_first")" 300
expect_eq "late stream window.first" "$(j "$R" "$sel | \"\(.window.first.seconds) \(.window.first.frame)\"")" "$S 500"
f=$(j "$R" '.outputs[] | select(.antenna == "10.0.0.13") | .path')
expect_eq "late stream file's first and last frame" "$(first_last "$f")" "800 $S 249 $((S + 2))"
grep -q "1 stream started after the window's start: 300 of the missing frames" "$WORK/capture.log" ||
  fail "the verdict does not name the late stream: $(tail -c 1500 "$WORK/capture.log")"
say "each stream's file holds exactly the window's frames; the late stream's 300 are loss"

# --- 2. stopped mid-window --------------------------------------------------
NOW=$(date +%s)
S=$((NOW + 2 - EPOCH52))
START="$(utc $((EPOCH52 + S)))Z"
STOP="$(utc $((EPOCH52 + S + 120)))Z"
start capture2.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/out2" -F codif \
  --report "$WORK/r2.json" --start-at "$START" --stop-at "$STOP" "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
GEN=(--antennas 2 --threads 1 -c 1000 --payload "$PAYLOAD" --start-seconds "$S")
send_traffic 30 --rate 8000
sleep 0.5
kill -INT "$CAPTURE"
finish "$CAPTURE" 10
expect_eq "capture exit code after SIGINT mid-window" "$RC" 0
R=$WORK/r2.json
expect_eq stopped_by "$(j "$R" .stopped_by)" sigint
expect_eq window.saw_end "$(j "$R" .window.saw_end)" false
expect_eq "missing (the end was not seen)" "$(j "$R" .totals.missing)" 0
expect_eq "packets in the window" "$(j "$R" .totals.codif)" 2000
j "$R" '.notes[]' | grep -q "before the window's end $STOP" ||
  fail "no note of the run ending before the window's end: $(j "$R" .notes)"
say "a stop mid-window: stopped_by sigint, nothing counted past the streams' last frames"
pass
