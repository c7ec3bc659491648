#!/usr/bin/env bash
# e2e usdt: the USDT probes (lib/core/probes.hpp) counted by bpftrace equal the
# report's counts exactly (docs/observability.md, "USDT probes"), during
#  (a) `ibvcap read` of a pcap made of `ibvcap gen` traffic with loss,
#      duplicates and reordering, a frame too late to classify, a frame
#      before a stream's start, a stream restart with its implausible frames,
#      and hand-made malformed and non-CODIF frames; bpftrace -c runs it, so
#      the probes are attached before it starts;
#  (b) a live `ibvcap capture --source pcap` in the testbed's namespaces, with
#      bpftrace attached to the binary by path before the capture starts (its
#      BEGIN line is the handshake), counting per process.
# It fails, never skips, when bpftrace is missing or cannot attach.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

require_tools bpftrace
AUDIT=$SRC/test/e2e/usdt_audit.bt
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
notes=$(readelf -n "$IBVCAP" 2>/dev/null || true)
grep -q 'Provider: ibvcap' <<<"$notes" ||
  fail "$IBVCAP has no ibvcap USDT probes (readelf -n shows no stapsdt note of provider ibvcap)"
# Every ibvcap probe site has its semaphore (lib/core/probes.hpp): a non-zero
# "Semaphore:" address in its note, which the tracer's attach turns on. (A
# site without one would fire without its guard; the counts below prove that
# attaching turns the semaphores on.)
unguarded=$(awk '/Provider:/ { p = $2 } /Name:/ { n = $2 }
  /Semaphore:/ && p == "ibvcap" && $NF ~ /^0x0*$/ { print n }' <<<"$notes" | sort -u | tr '\n' ' ')
[ -z "$unguarded" ] || fail "$IBVCAP: ibvcap probes without a semaphore (readelf -n, Semaphore: 0): $unguarded"
guarded=$(awk '/Provider:/ { p = $2 } /Semaphore:/ && p == "ibvcap" && $NF !~ /^0x0*$/ { n++ } END { print n + 0 }' <<<"$notes")
[ "$guarded" -gt 0 ] || fail "$IBVCAP: readelf -n shows no Semaphore: address for the ibvcap probes"
say "$guarded ibvcap probe sites, each with a semaphore"

# probe OUT MAP KEY: the value of @MAP[KEY] in bpftrace's JSON output (0 if absent).
probe() {
  jq -rs --arg m "@$2" --arg k "$3" \
    '[.[] | select(.type == "map") | .data[$m] // empty][0] // {} | .[$k] // 0' "$1"
}
# probe_sum OUT MAP PREFIX: the sum of @MAP's values whose key starts with PREFIX.
probe_sum() {
  jq -rs --arg m "@$2" --arg p "$3" \
    '[.[] | select(.type == "map") | .data[$m] // empty][0] // {}
     | [to_entries[] | select(.key | startswith($p)) | .value] | add // 0' "$1"
}

# audit OUT PID REPORT EXIT_CODE CASE: every probe count against the report.
audit() {
  local out=$1 pid=$2 r=$3 code=$4 what=$5 v=() i
  grep -q '"usdt-audit: attached' "$out" || fail "$what: bpftrace never attached: $(grep -v RLIMIT "$WORK/bt-$what.err" | head -3 | tr '\n' ' ')"
  for i in 0 1 2 3 4 5 6 7 8; do v[i]=$(probe "$out" verdict "$pid,$i"); done
  expect_eq "$what: ibvcap:frame count = totals.codif" "$(probe "$out" frames "$pid")" "$(j "$r" .totals.codif)"
  expect_eq "$what: frames of verdict duplicate = totals.duplicates" "${v[3]}" "$(j "$r" .totals.duplicates)"
  expect_eq "$what: frames of verdict late_fill + before_start + too_late = totals.out_of_order" \
    $((v[4] + v[5] + v[6])) "$(j "$r" .totals.out_of_order)"
  expect_eq "$what: frames of verdict too_late = totals.too_late" "${v[6]}" "$(j "$r" .totals.too_late)"
  expect_eq "$what: frames of verdict restart = totals.restarts" "${v[8]}" "$(j "$r" .totals.restarts)"
  expect_eq "$what: implausible - 15 x restart = totals.implausible" $((v[7] - 15 * v[8])) "$(j "$r" .totals.implausible)"
  expect_eq "$what: frames of verdict first = streams" "${v[0]}" "$(j "$r" '.streams | length')"
  expect_eq "$what: sum of ibvcap:gap frames - late_fill = totals.missing" \
    $(($(probe "$out" gap_frames "$pid") - v[4])) "$(j "$r" .totals.missing)"
  expect_eq "$what: ibvcap:reason by name = reasons" \
    "$(jq -rs --arg p "$pid," '[.[] | select(.type == "map") | .data["@reason"] // empty][0] // {}
         | to_entries | map(select(.key | startswith($p)) | {(.key | ltrimstr($p)): .value}) | add // {} | tojson' "$out" | jq -Sc .)" \
    "$(jq -Sc '.reasons.malformed + .reasons.non_codif' "$r")"
  expect_eq "$what: ibvcap:reason count = malformed + non_codif" "$(probe_sum "$out" reason "$pid,")" \
    $(($(j "$r" .totals.malformed) + $(j "$r" .totals.non_codif)))
  expect_eq "$what: sum of ibvcap:write records = totals.written" "$(probe_sum "$out" written "$pid,")" "$(j "$r" .totals.written)"
  expect_eq "$what: sum of ibvcap:write_drop records = totals.write_drops" "$(probe "$out" write_drops "$pid")" "$(j "$r" .totals.write_drops)"
  for f in codif pcap; do
    # The report's bytes are the files' lengths: the records plus a pcap file header per file.
    expect_eq "$what: ibvcap:write bytes of $f + file headers = the $f outputs' bytes" \
      $(($(probe "$out" write_bytes "$pid,$f") + $([ $f = pcap ] && echo 24 || echo 0) * $(jq "[.outputs[] | select(.format == \"$f\") | .files] | add // 0" "$r"))) \
      "$(jq "[.outputs[] | select(.format == \"$f\") | .bytes] | add // 0" "$r")"
  done
  expect_eq "$what: ibvcap:run_start" "$(probe "$out" run_start "$pid,$(j "$r" .command)")" 1
  expect_eq "$what: ibvcap:run_stop with the exit code" "$(probe "$out" run_stop "$pid,$code")" 1
  expect_eq "$what: ibvcap:completion (no verbs source)" "$(probe_sum "$out" completion "$pid,")" 0
}

# (a) ibvcap read ------------------------------------------------------------
MCAST=239.17.0.1:36001
FMT=(--payload 64 --frames-per-period 10000)
PCAP=$WORK/mixed.pcap
"$IBVCAP" gen -q -w "$PCAP" --antennas 2 --threads 2 -c 9000 "${FMT[@]}" \
  --loss 0.01 --duplicate 0.01 --reorder 0.01 --seed 7 "$MCAST" || fail "ibvcap gen -w failed"
# append PARTS...: the records of more gen traffic, after PCAP's (its 24-byte file header dropped).
append() {
  "$IBVCAP" gen -q -w "$WORK/part.pcap" --overwrite --antennas 1 --threads 1 "${FMT[@]}" "$@" "$MCAST" ||
    fail "ibvcap gen -w $* failed"
  tail -c +25 "$WORK/part.pcap" >>"$PCAP"
}
append -c 1                                        # frame 0 of 10.0.0.11/0, ~9000 behind: too late
append -c 20 --start-seconds 100                   # 10^6 frames ahead: 15 implausible, then a restart
append -c 1 --start-seconds 99 --start-frame 9995  # before the new segment's start: a gap of 4 at its start
append -c 1 --start-seconds 500                    # one far frame (a corrupt header): implausible
# record HEX: one pcap record (nanosecond pcap, little-endian) holding the bytes HEX.
record() {
  local n=$((${#1} / 2)) le
  le=$(printf '%02x%02x%02x%02x' $((n & 255)) $((n >> 8 & 255)) 0 0)
  local hex="0000000000000000$le$le$1"
  # shellcheck disable=SC2059,SC2001 # the format is the bytes, as \xHH escapes (sed: a backreference)
  printf "$(sed 's/../\\x&/g' <<<"$hex")" >>"$PCAP"
}
ETH=01005e110001020000000001
record "${ETH}0806$(printf '%092d' 0)"         # ARP: not_ipv4
record "${ETH}08006500001c000000001111$(printf '%040d' 0)" # IP version 6 in an IPv4 frame: bad_ip_version
record "0100"                                   # 2 bytes: truncated_ethernet
set +e
bpftrace -f json -o "$WORK/bt-read.json" "$AUDIT" "$IBVCAP" \
  -c "$IBVCAP read -q -r $PCAP -F codif -F pcap -o $WORK/out --report $WORK/read.json" \
  >"$WORK/read.log" 2>"$WORK/bt-read.err"
rc=$?
set -e
[ "$rc" = 0 ] || fail "bpftrace cannot attach to $IBVCAP (exit $rc): $(grep -v RLIMIT "$WORK/bt-read.err" | head -3 | tr '\n' ' ')"
[ -s "$WORK/read.json" ] || fail "ibvcap read under bpftrace wrote no report"
R=$WORK/read.json
PID=$(jq -rs '[.[] | select(.type == "map") | .data["@run_start"] // empty][0] // {} | keys[0] // "" | split(",")[0]' "$WORK/bt-read.json")
if [ -z "$PID" ] || [ "$PID" = null ]; then
  fail "read: no ibvcap:run_start seen (bpftrace attached, but the probes did not fire: their semaphores not turned on?)"
fi
for key in missing duplicates out_of_order too_late implausible restarts malformed non_codif written; do
  [ "$(j "$R" ".totals.$key")" -gt 0 ] || fail "read: the report has no $key: that count would not be tested"
done
[ "$(j "$R" .verdict)" = loss ] || fail "read: verdict $(j "$R" .verdict), expected loss"
audit "$WORK/bt-read.json" "$PID" "$R" 3 read
say "read: every probe count equals the report ($(j "$R" .totals.codif) frames, missing $(j "$R" .totals.missing)," \
  "dup $(j "$R" .totals.duplicates), ooo $(j "$R" .totals.out_of_order), too late $(j "$R" .totals.too_late)," \
  "implausible $(j "$R" .totals.implausible), restarts $(j "$R" .totals.restarts)," \
  "malformed $(j "$R" .totals.malformed), non-stream $(j "$R" .totals.non_codif), written $(j "$R" .totals.written))"

# (b) live capture -----------------------------------------------------------
testbed_up
MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 2 --threads 2 -c 500 --payload 1024 --loss 0.02 --duplicate 0.02 --reorder 0.02 --seed 7)
"$IBVCAP" gen -q -w "$WORK/ref.pcap" --truth "$WORK/truth.json" "${GEN[@]}" "${MCAST[@]}" || fail "ibvcap gen -w failed"
PACKETS=$(j "$WORK/truth.json" .totals.packets)
ERR_LOG=bt-live.err start bt-live.log bpftrace -f json -o "$WORK/bt-live.json" "$AUDIT" "$IBVCAP"
BT=$STARTED
for ((i = 0; i < 400; i++)); do
  grep -q '"usdt-audit: attached' "$WORK/bt-live.json" 2>/dev/null && break
  kill -0 "$BT" 2>/dev/null || fail "bpftrace cannot attach to $IBVCAP: $(grep -v RLIMIT "$WORK/bt-live.err" | head -3 | tr '\n' ' ')"
  sleep 0.05
done
grep -q '"usdt-audit: attached' "$WORK/bt-live.json" || fail "bpftrace did not attach to $IBVCAP within 20 s"
start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -o "$WORK/live" -F codif -F pcap \
  --report "$WORK/live.json" -c "$PACKETS" --duration 30 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
send_traffic 30 --rate 20000
finish "$CAPTURE" 40
CODE=$RC
kill -INT "$BT"
finish "$BT" 20
R=$WORK/live.json
expect_eq "live: totals.packets" "$(j "$R" .totals.packets)" "$PACKETS"
if [ "$(j "$R" .totals.missing)" = 0 ] || [ "$(j "$R" .totals.duplicates)" = 0 ]; then
  fail "live: the report has no missing or no duplicate frames: those counts would not be tested"
fi
audit "$WORK/bt-live.json" "$CAPTURE" "$R" "$CODE" live
say "live: every probe count of process $CAPTURE equals the report ($(j "$R" .totals.codif) frames, exit $CODE)"
pass
