#!/usr/bin/env bash
# e2e gpu_xid: the GPU XID witness in a whole `ibvcap capture --gpu-standin`
# (docs/observability.md, "GPU errors as a witness (XID)"). The driver's
# tracepoint nvidia:nvidia_dev_xid is stood in for by a uprobe event of the
# same group, name and field names on xid_helper's emit_xid (test/xid_helper.cpp).
# Clean traffic each time; asserts:
#   an XID on the stand-in GPU's address during the run -> exit 3, the loss
#     reason names it, gpu_xids has it with capture_gpu true
#   an XID on another address -> exit 0 (zero-loss), a note names it
#   no nvidia group in tracefs -> exit 0, the note "GPU XID witness absent: ..."
# `ip netns exec` mounts a sysfs of its own (without tracefs under it), so
# the capture is given a tracefs mounted outside /sys (--tracefs-root).
# Needs root, tracefs and uprobe events; fails saying so without them.
# Usage: gpu_xid.sh IBVCAP_BINARY SOURCE_DIR XID_HELPER
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

HELPER=$(readlink -f "${3:-}")
[ -x "$HELPER" ] || fail "no xid_helper at '${3:-}' (the third argument)"
GPU=0000:3b:00.0
MCAST=(239.17.0.1:36001)
GEN=(--antennas 2 --threads 2 -c 400 --payload 2048 --nchan 4)

# A tracefs of the test's own, outside $WORK (rm -rf must never reach it).
TRACEFS=$(mktemp -d "${TMPDIR:-/tmp}/ibvcap-e2e-tracefs.XXXXXX")
UPROBE=0
xid_cleanup() {
  local pid
  # The captures first: a killed one leaves its instance, which keeps the
  # stand-in busy.
  for pid in "${CHILDREN[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${CHILDREN[@]}"; do
    wait "$pid" 2>/dev/null || true
    for i in "$TRACEFS"/instances/ibvcap-"$pid"-*; do
      [ -d "$i" ] || continue
      echo 0 >"$i/events/nvidia/nvidia_dev_xid/enable" 2>/dev/null || true
      rmdir "$i" 2>/dev/null || true
    done
  done
  if [ "$UPROBE" = 1 ]; then
    echo '-:nvidia/nvidia_dev_xid' >>"$TRACEFS/uprobe_events" ||
      echo "$TEST: could not remove the uprobe nvidia/nvidia_dev_xid" >&2
  fi
  if mountpoint -q "$TRACEFS"; then umount -l "$TRACEFS" || true; fi
  rmdir "$TRACEFS" 2>/dev/null || true
}
# Before lib.sh's cleanup, which it then runs with the test's exit status.
trap 'XID_RC=$?; xid_cleanup; (exit "$XID_RC"); cleanup' EXIT

# The two options, misused: usage errors (exit 2), one line each.
for bad in "--gpu-standin-pci $GPU" "--gpu --gpu-standin-pci $GPU" "--tracefs-root /sys/kernel/tracing"; do
  rc=0
  # shellcheck disable=SC2086 # the options split as written
  "$IBVCAP" capture -i lo $bad "${MCAST[@]}" >/dev/null 2>"$WORK/usage.txt" || rc=$?
  expect_eq "exit code of capture $bad" "$rc" 2
  expect_eq "stderr lines of capture $bad" "$(wc -l <"$WORK/usage.txt")" 1
done
grep -qx "ibvcap capture: --tracefs-root needs the GPU payload path: add --gpu" "$WORK/usage.txt" ||
  fail "--tracefs-root alone: $(cat "$WORK/usage.txt")"

[ "$(id -u)" -eq 0 ] || fail "defining a uprobe needs root (uid $(id -u)); CI runs this as root"
mount -t tracefs nodev "$TRACEFS" || fail "cannot mount tracefs at $TRACEFS"
[ ! -e "$TRACEFS/events/nvidia/nvidia_dev_xid" ] ||
  fail "this host has the NVIDIA driver's own nvidia:nvidia_dev_xid: the stand-in cannot be defined"
OFFSET=$("$HELPER" --offset) || fail "xid_helper --offset failed"
case $(uname -m) in
  x86_64) ARGS=('%di' '%si' '%dx') ;;
  aarch64) ARGS=('%x0' '%x1' '%x2') ;;
  *) fail "the stand-in knows the argument registers of x86_64 and aarch64 only, not $(uname -m)" ;;
esac
echo "p:nvidia/nvidia_dev_xid $HELPER:$OFFSET dev=+0(${ARGS[0]}):string error_code=${ARGS[1]}:u32 msg=+0(${ARGS[2]}):string" \
  >>"$TRACEFS/uprobe_events" ||
  fail "cannot define the uprobe stand-in in $TRACEFS/uprobe_events (needs CONFIG_UPROBE_EVENTS)"
UPROBE=1

testbed_up

# capture_with_xid NAME [DEV CODE MSG]: a clean capture of the generator's
# frames into the stand-in's block rings, the XID fired (when given) after
# the capture has joined and before the traffic. Its exit code in RC, the
# report in $WORK/NAME.json.
capture_with_xid() {
  local name=$1
  shift
  start "$name.log" rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/$name.json" \
    -c "$PACKETS" --duration 30 --gpu-standin --gpu-standin-pci "$GPU" --tracefs-root "$TRACEFS" \
    --frames-per-block 32 --gpu-blocks 8 "${MCAST[@]}"
  local capture=$STARTED
  wait_for_join "$capture" 15 "${MCAST[@]}"
  if [ $# -gt 0 ]; then
    "$HELPER" "$@" || fail "xid_helper $* failed"
  fi
  start "send-$name.log" tx "$IBVCAP" gen --send -i "$TX_IF" --rate 20000 "${GEN[@]}" "${MCAST[@]}"
  finish "$STARTED" 30
  expect_eq "$name: sender exit code" "$RC" 0
  finish "$capture" 30
}

gen_reference

# 1. An XID on the capture's GPU: loss, named.
capture_with_xid own "$GPU" 79 "GPU has fallen off the bus."
R=$WORK/own.json
expect_eq "own: capture exit code (3 = loss)" "$RC" 3
expect_eq "own: totals.missing" "$(j "$R" .totals.missing)" 0
expect_eq "own: gpu_xids" "$(jq -c '[.gpu_xids[] | [.device, .code, .message, .capture_gpu]]' "$R")" \
  '[["0000:3b:00.0",79,"GPU has fallen off the bus.",true]]'
expect_eq "own: the only loss reason" "$(jq -r '.loss_reasons | length' "$R")" 1
jq -e --arg t "$(j "$R" '.gpu_xids[0].time')" \
  '.loss_reasons[0] == "GPU 0000:3b:00.0 reported Xid 79: GPU has fallen off the bus. at " + $t' \
  "$R" >/dev/null || fail "own: loss reason: $(jq -c .loss_reasons "$R")"
grep -q "GPU 0000:3b:00.0 reported Xid 79" "$WORK/own.log" || fail "own: the summary does not name the XID"
say "an XID on the capture's GPU: exit 3, $(jq -c '.loss_reasons[0]' "$R")"

# 2. An XID on another GPU: zero-loss, noted.
capture_with_xid other 0000:af:00.0 13 "Graphics SM Warp Exception"
R=$WORK/other.json
expect_eq "other: capture exit code (0 = zero-loss)" "$RC" 0
expect_eq "other: gpu_xids" "$(jq -c '[.gpu_xids[] | [.device, .code, .capture_gpu]]' "$R")" \
  '[["0000:af:00.0",13,false]]'
jq -e '.notes[] | select(startswith("GPU 0000:af:00.0 (not the capture'"'"'s) reported Xid 13: Graphics SM Warp Exception at "))' \
  "$R" >/dev/null || fail "other: no note naming the XID: $(jq -c .notes "$R")"
say "an XID on another GPU: exit 0 and a note"

# 3. No nvidia group: the witness is absent, the run goes on.
echo '-:nvidia/nvidia_dev_xid' >>"$TRACEFS/uprobe_events" || fail "cannot remove the stand-in"
UPROBE=0
capture_with_xid absent
R=$WORK/absent.json
expect_eq "absent: capture exit code" "$RC" 0
expect_eq "absent: gpu_xids" "$(jq -c .gpu_xids "$R")" '[]'
jq -e --arg r "$TRACEFS" '.notes[] | select(. == "GPU XID witness absent: no tracepoint nvidia:nvidia_dev_xid in " + $r + "/events (the NVIDIA kernel module is not loaded, or its version has no such tracepoint)")' \
  "$R" >/dev/null || fail "absent: no note: $(jq -c .notes "$R")"
say "no nvidia group: exit 0 and the note"
for i in "$TRACEFS"/instances/ibvcap-*; do
  [ ! -e "$i" ] || fail "a trace instance was left behind: $i"
done
pass
