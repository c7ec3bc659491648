#!/usr/bin/env bash
# e2e stall: the output disk is slower than the capture (issue 24, "The
# disk-stall test"). A live `capture --source pcap --direct-io -F pcap` at a
# fixed rate writes to an ext4 filesystem on a loop device whose writes, from
# the capture's cgroup, are throttled (cgroup v1 blkio.throttle.write_bps_device
# on the loop device: O_DIRECT writes are submitted in the writing process's
# context, so the throttle applies to them; Documentation/admin-guide/cgroup-v1/
# blkio-controller.rst). The wire brings about 3x what the disk takes, so a
# backlog grows for the whole send.
#
#  1. Under a bound with room for the whole backlog (--writer-memory 512M):
#     zero records dropped, verdict zero-loss, and the report's backlog peak
#     shows the stall was real (more than 40 MiB waited for the disk).
#  2. With a bound too small for the stall (--writer-memory 48M): records are
#     dropped with cause writer, only once the writers' memory really was at
#     its bound (peak >= 90% of it, no drop below the bound), and the verdict
#     names the bound and the option that raises it.
#
# Needs root (namespaces, a loop device, a cgroup); fails, saying so, without.
# E2E_STALL_RATE / _FRAMES / _BPS change the defaults.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
require_tools losetup mkfs.ext4 mount

RATE=${E2E_STALL_RATE:-3000}       # frames/s of 8298 bytes: ~25 MB/s on the wire
PER_STREAM=${E2E_STALL_FRAMES:-1500} # x 12 streams = 18,000 frames, 6 s, ~150 MB
BPS=${E2E_STALL_BPS:-8388608}      # the disk: 8 MiB/s
MCAST=(239.23.0.1:36001 239.23.0.2:36001)
GEN=(--antennas 3 --threads 2 -c "$PER_STREAM")
PACKETS=$((PER_STREAM * 12))

CG=/sys/fs/cgroup/blkio
[ -f "$CG/cgroup.procs" ] || fail "no cgroup v1 blkio hierarchy at $CG: this test throttles the output disk with it"
LOOP=""
MNT=$WORK/disk
CGDIR=$CG/ibvcap-e2e-stall-$$
stall_cleanup() {
  umount "$MNT" 2>/dev/null || true
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
  [ -d "$CGDIR" ] && rmdir "$CGDIR" 2>/dev/null || true
  cleanup
}
trap stall_cleanup EXIT

say "a 1 GiB ext4 filesystem on a loop device, writes throttled to $BPS bytes/s"
truncate -s 1G "$WORK/disk.img"
mkfs.ext4 -q -F "$WORK/disk.img" || fail "mkfs.ext4 failed"
LOOP=$(losetup --find --show "$WORK/disk.img") || fail "no loop device could be set up (losetup -f)"
mkdir -p "$MNT"
mount -o noatime "$LOOP" "$MNT" || fail "cannot mount $LOOP"
mkdir "$CGDIR" || fail "cannot create the cgroup $CGDIR"
MAJMIN=$(lsblk -ndo MAJ:MIN "$LOOP" | tr -d ' ')
echo "$MAJMIN $BPS" >"$CGDIR/blkio.throttle.write_bps_device" ||
  fail "cannot throttle $LOOP ($MAJMIN) in $CGDIR"

testbed_up

# capture_run NAME BOUND: one capture in the throttled cgroup while the
# generator sends; its exit code in RC, its report in $WORK/NAME.json.
capture_run() {
  local name=$1 bound=$2
  mkdir -p "$MNT/$name"
  say "$name: capture --direct-io -F pcap --writer-memory $bound into the throttled disk"
  # The shell joins the cgroup, then becomes the capture: every write it
  # submits is throttled.
  start "$name.log" sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$CGDIR" \
    ip netns exec "$RX_NS" "$IBVCAP" capture --source pcap -i "$RX_IF" --direct-io -F pcap \
    -o "$MNT/$name" --writer-memory "$bound" --report "$WORK/$name.json" -c "$PACKETS" \
    --duration 120 "${MCAST[@]}"
  local capture=$STARTED
  wait_for_join "$capture" 15 "${MCAST[@]}"
  local t0
  t0=$(now_us)
  send_traffic 60 --rate "$RATE"
  say "$name: sent $PACKETS frames at $RATE/s in $(secs_since "$t0") s; the capture drains its backlog"
  finish "$capture" 90
  [ -s "$WORK/$name.json" ] || fail "$name: no report (exit $RC): $(tail -3 "$WORK/$name.log")"
}

capture_run absorbed 512M
R=$WORK/absorbed.json
expect_eq "absorbed: exit code (0 = zero-loss)" "$RC" 0
expect_eq "absorbed: verdict" "$(j "$R" .verdict)" zero-loss
expect_eq "absorbed: packets" "$(j "$R" .totals.packets)" "$PACKETS"
expect_eq "absorbed: write_drops" "$(j "$R" .totals.write_drops)" 0
peak=$(j "$R" .writer_memory.backlog_peak_bytes)
[ "$peak" -gt $((40 << 20)) ] ||
  fail "absorbed: the backlog peaked at $peak bytes: the disk was not slower than the capture, so nothing was tested"
expect_eq "records in the pcap" "$(pcap_frames "$MNT/absorbed/ibvcap.pcap")" "$PACKETS"
say "absorbed: $PACKETS frames written, backlog peak $((peak >> 20)) MiB of 512, no drop"

capture_run bounded 48M
R=$WORK/bounded.json
expect_eq "bounded: exit code (3 = loss)" "$RC" 3
expect_eq "bounded: verdict" "$(j "$R" .verdict)" loss
drops=$(j "$R" .totals.write_drops)
[ "$drops" -gt 0 ] || fail "bounded: no record was dropped under a 48 MiB bound"
expect_eq "bounded: drops at the bound" "$(j "$R" .writer_memory.drops_at_bound)" "$drops"
expect_eq "bounded: drops below the bound" "$(j "$R" .writer_memory.drops_below_bound)" 0
mem_peak=$(j "$R" .writer_memory.peak_bytes)
bound=$(j "$R" .writer_memory.bound_bytes)
[ "$mem_peak" -ge $((bound / 10 * 9)) ] ||
  fail "bounded: records were dropped while the writers held $mem_peak of $bound bytes"
grep -q -- "--writer-memory 48 MiB" "$WORK/bounded.log" ||
  fail "bounded: the summary does not name the bound reached: $(grep -i 'not written' "$WORK/bounded.log")"
expect_eq "bounded: records in the pcap + dropped" \
  $(($(pcap_frames "$MNT/bounded/ibvcap.pcap") + drops)) "$PACKETS"
say "bounded: $drops records dropped, all at the bound (memory peak $((mem_peak >> 20)) MiB of $((bound >> 20)))"
pass
