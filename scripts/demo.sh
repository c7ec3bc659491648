#!/usr/bin/env bash
# The README's main-job command: install dependencies, build, then run a LIVE
# capture: `ibvcap gen --send` multicasts six antennas x two CODIF threads x two
# groups of CODIF traffic, with a little injected loss, duplication and
# reordering, from one network namespace; `ibvcap capture --source pcap`
# captures it in another (scripts/testbed.sh: two namespaces joined by a veth
# pair, MTU 9000, real IGMP). Prints the capture's ledger, then the generator's
# ground truth next to it, stream by stream, and checks that they agree.
#
#   scripts/demo.sh            CODIF
#   scripts/demo.sh --vdif     VDIF frames (issue 28): `gen --vdif`, the capture
#                              given GROUP:PORT/vdif, 24 streams (one per group,
#                              antenna = station, thread), 1000 frames per second
#                              given to both (--vdif-frames-per-second), invalid
#                              frames injected too
#   scripts/demo.sh --vtp      the same, each frame after a VTP sequence number
#                              (GROUP:PORT/vtp); the numbers must witness the
#                              same loss and duplicates as the frame headers
#   scripts/demo.sh --compare REPORT TRUTH
#                              only the comparison: a report against a truth,
#                              stream by stream; exit 1 when they differ
#
# The comparison: the totals and every stream (by group, antenna, station and
# thread) of the report equal the truth's in packets, missing, duplicates,
# out_of_order, invalid, first and last (and, for VTP, the sequence numbers'
# packets, missing and duplicates the truth's packets, missing and
# duplicates); the capture lost nothing on the way in; it exited 3 (loss, as
# injected). Anything else prints MISMATCH with the streams that differ and
# exits 1.
#
# Where network namespaces cannot be created, it says so and captures on the
# loopback interface instead (antennas 127.0.0.11-16, multicast looped back).
# DEMO_LOOPBACK=1 forces that; DEMO_DIR=DIR keeps the files in DIR;
# DEMO_TESTBED=NAME names the testbed (default demo); IBVCAP=PATH runs that
# binary, without installing or building anything (test/e2e/vdif.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 [--vdif | --vtp]   or   $0 --compare REPORT TRUTH" >&2
  exit 2
}

# compare REPORT TRUTH: 0 when they agree stream by stream, else the
# differences on stderr and 1.
compare() {
  local report=$1 truth=$2 same=1 key t r
  for f in "$report" "$truth"; do
    jq -e '.streams | type == "array"' "$f" >/dev/null 2>&1 || {
      echo "demo: $f is not a report or truth (no .streams)" >&2
      return 1
    }
  done
  printf '%-14s %10s %10s\n' "" truth ledger
  for key in packets missing duplicates out_of_order invalid; do
    t=$(jq ".totals.$key" "$truth")
    r=$(jq ".totals.$key" "$report")
    printf '%-14s %10s %10s%s\n' "$key" "$t" "$r" "$([ "$t" = "$r" ] || echo "   <- differs")"
    [ "$t" = "$r" ] || same=0
  done
  # One line per stream, the same fields from both. VTP streams also show the
  # report's sequence-number witness (.psn), which must equal the truth's
  # frame counts: every datagram carries its slot's number.
  # shellcheck disable=SC2016 # jq's own $side, $fmt
  # A VDIF station id is two characters when both bytes are printable (AA).
  local f='[.streams[] | {format, group, antenna, station, thread, packets, missing, duplicates,
                          out_of_order, invalid, first, last,
                          name: (.format as $fmt | [(.station / 256 | floor), (.station % 256)]
                                 | if $fmt != "codif" and all(. >= 33 and . < 127)
                                   then " (\(implode))" else "" end),
                          psn: (if .format != "vtp" then null
                                elif $side == "truth" then {packets, missing, duplicates}
                                else (.psn // {}) | {packets, missing, duplicates} end)}]
           | sort_by(.group, .antenna, .station, .thread) | .[]
           | "\(.format) \(.group) \(.antenna) station \(.station)\(.name) thread \(.thread): packets \(.packets)"
             + " missing \(.missing) duplicates \(.duplicates) out_of_order \(.out_of_order)"
             + " invalid \(.invalid) first \(.first.seconds):\(.first.frame)"
             + " last \(.last.seconds):\(.last.frame)"
             + (if .psn then " psn \(.psn.packets)/\(.psn.missing)/\(.psn.duplicates)" else "" end)'
  local rs ts
  rs=$(jq -r --arg side report "$f" "$report") || return 1
  ts=$(jq -r --arg side truth "$f" "$truth") || return 1
  if [ "$rs" != "$ts" ]; then
    echo "demo: the per-stream ledger differs from the truth ('<' truth, '>' ledger):" >&2
    diff <(printf '%s\n' "$ts") <(printf '%s\n' "$rs") | grep '^[<>]' >&2 || true
    same=0
  else
    echo "$(printf '%s\n' "$rs" | wc -l) streams, each equal to the truth:"
    printf '%s\n' "$rs" | sed 's/^/  /'
  fi
  [ "$same" = 1 ]
}

format=codif
case ${1:-} in
  '') ;;
  --vdif) format=vdif ;;
  --vtp) format=vtp ;;
  --compare)
    [ $# = 3 ] || usage
    if compare "$2" "$3"; then
      echo "demo: the ledger equals the truth"
      exit 0
    fi
    echo "demo: MISMATCH between ledger and ground truth" >&2
    exit 1
    ;;
  *) usage ;;
esac
[ $# -le 1 ] || usage

if [ -n "${IBVCAP:-}" ]; then
  ibvcap=$(readlink -f "$IBVCAP")
  [ -x "$ibvcap" ] || { echo "demo: IBVCAP=$IBVCAP is not an executable" >&2; exit 1; }
else
  bash scripts/install-deps.sh
  BUILD_DIR=build bash scripts/build.sh >/dev/null
  ibvcap=$PWD/build/capture/ibvcap
fi
tb=${DEMO_TESTBED:-demo}

work=${DEMO_DIR:-$(mktemp -d /tmp/ibvcap-demo.XXXXXX)}
mkdir -p "$work"
rm -rf "$work/out" "$work/report.json" "$work/truth.json"
mcast=(239.17.0.1:36001 239.17.0.2:36001)
# 24,000 frames of 8298 bytes at 10,000 frames/s: 2.4 s, 400 MB of output files.
traffic=(--threads 2 -c 1000 --loss 0.001 --duplicate 0.001 --reorder 0.001 --seed 1)
outputs=(-F codif -F codifhdr -F pcap)
groups=("${mcast[@]}")
stream_opts=()
if [ "$format" != codif ]; then
  # 24,000 VDIF frames of 8266 bytes (8274 with VTP's number): the same 2.4 s.
  # The rate is given to the capture, as an operator who knows the streams
  # would; without it each stream learns it from its first whole second
  # (docs/formats.md, "VDIF frame rates"). The files: pcap (-F codif is
  # CODIF's).
  traffic=("--$format" --vdif-frames-per-second 1000 "${traffic[@]}" --invalid 0.001)
  groups=("${mcast[@]/%//$format}")
  stream_opts=(--vdif-frames-per-second 1000)
  outputs=(-F pcap)
fi
rate=10000

capture_pid=
testbed_up=0
cleanup() {
  if [ -n "$capture_pid" ]; then kill "$capture_pid" 2>/dev/null || true; fi
  if [ "$testbed_up" = 1 ]; then bash scripts/testbed.sh down "$tb" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

why=
if [ "${DEMO_LOOPBACK:-0}" = 1 ]; then
  why="DEMO_LOOPBACK=1"
elif why=$(bash scripts/testbed.sh up "$tb" 2>&1); then
  testbed_up=1
  echo "== $why"
fi
# shellcheck disable=SC2153 # RX_IF, TX_IF: set by the eval
if [ "$testbed_up" = 1 ]; then
  # RX_NS TX_NS RX_IF TX_IF: the testbed's names (derived from $tb).
  eval "$(bash scripts/testbed.sh env "$tb")"
  rx=(ip netns exec "$RX_NS")
  tx=(ip netns exec "$TX_NS")
  rx_if=$RX_IF
  tx_if=$TX_IF
  antennas=(--antennas 6)  # 10.0.0.11-16, the testbed's sender addresses
  loop=()
else
  echo "== no network namespaces ($why): capturing on the loopback interface instead"
  rx=()
  tx=()
  rx_if=lo
  tx_if=lo
  antennas=()
  for i in 11 12 13 14 15 16; do antennas+=(--antenna "127.0.0.$i"); done
  loop=(--loop)
fi

# The truth is known before sending (same options, same seed): the capture
# stops when every packet has arrived.
"$ibvcap" gen -q -w /dev/null --truth "$work/plan.json" "${antennas[@]}" "${traffic[@]}" "${mcast[@]}"
packets=$(jq .totals.packets "$work/plan.json")

echo "== capturing $format on $rx_if: ibvcap capture --source pcap ${outputs[*]} ${stream_opts[*]} -c $packets ${groups[*]}"
"${rx[@]}" "$ibvcap" capture --source pcap -i "$rx_if" -o "$work/out" "${outputs[@]}" \
  "${stream_opts[@]}" --report "$work/report.json" --html "$work/run.html" -c "$packets" --duration 60 "${groups[@]}" \
  >"$work/capture.log" 2>&1 &
capture_pid=$!

# Ready once the kernel holds its memberships (/proc/net/igmp, groups in hex).
want=()
for g in "${mcast[@]}"; do
  IFS=. read -r a b c d <<<"${g%%:*}"
  want+=("$(printf '%02X%02X%02X%02X' "$d" "$c" "$b" "$a")")
done
joined=0
for _ in $(seq 100); do
  kill -0 "$capture_pid" 2>/dev/null || break
  # shellcheck disable=SC2016 # awk's own fields
  # The kernel prints the device as "%-10s:" (net/ipv4/igmp.c,
  # igmp_mc_seq_show), so a name of 10 or more characters carries the colon.
  have=$("${rx[@]}" awk -v dev="$rx_if" '/^[0-9]/ { on = ($2 == dev || $2 == dev ":") ; next } on { print $1 }' /proc/net/igmp)
  joined=1
  for h in "${want[@]}"; do grep -qx "$h" <<<"$have" || joined=0; done
  [ "$joined" = 1 ] && break
  sleep 0.1
done
if [ "$joined" != 1 ]; then
  cat "$work/capture.log" >&2
  echo "demo: the capture did not start (it did not join ${mcast[*]} on $rx_if)" >&2
  exit 1
fi

echo "== sending $packets packets at $rate packets/s: ibvcap gen --send -i $tx_if ${antennas[*]} ${traffic[*]} ${loop[*]}"
"${tx[@]}" "$ibvcap" gen --send -i "$tx_if" --rate "$rate" --truth "$work/truth.json" \
  "${antennas[@]}" "${traffic[@]}" "${loop[@]}" "${mcast[@]}"

set +e
wait "$capture_pid"
rc=$?
set -e
capture_pid=
echo "== the capture's ledger"
cat "$work/capture.log"
if [ ! -s "$work/report.json" ]; then
  echo "demo: the capture wrote no report (exit code $rc)" >&2
  exit 1
fi

echo "== ledger against ground truth"
same=1
compare "$work/report.json" "$work/truth.json" || same=0
echo "exit code $rc (3 = loss detected, as injected); files in $work/out, report $work/report.json"
# Every frame that arrived is in the files and nothing was lost on the way in:
# the only loss is the injected one.
lost=$(jq '.totals.nic_drops + .totals.write_drops + .totals.malformed + .totals.too_late' "$work/report.json")
if [ "$lost" != 0 ]; then
  echo "demo: the capture could not keep up: $(jq -r '.loss_reasons | join("; ")' "$work/report.json")" \
    "(run it on an idle machine)" >&2
  same=0
fi
if [ -s "$work/run.html" ]; then
  echo "== the run page (open it in any browser, offline): $work/run.html"
else
  echo "demo: the capture wrote no run page (--html $work/run.html)" >&2
  same=0
fi
if [ "$same" = 1 ] && [ "$rc" = 3 ]; then
  echo "demo: the ledger reproduces the injected faults exactly"
else
  echo "demo: MISMATCH between ledger and ground truth" >&2
  exit 1
fi
