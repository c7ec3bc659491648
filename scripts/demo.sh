#!/usr/bin/env bash
# The README's main-job command: install dependencies, build, then run a LIVE
# capture: `ibvcap gen --send` multicasts six antennas x two CODIF threads x two
# groups of CODIF traffic, with a little injected loss, duplication and
# reordering, from one network namespace; `ibvcap capture --source pcap`
# captures it in another (scripts/testbed.sh: two namespaces joined by a veth
# pair, MTU 9000, real IGMP). Prints the capture's ledger, then the generator's
# ground truth next to it, and checks that they agree.
#
# Where network namespaces cannot be created, it says so and captures on the
# loopback interface instead (antennas 127.0.0.11-16, multicast looped back).
# DEMO_LOOPBACK=1 forces that; DEMO_DIR=DIR keeps the files in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
BUILD_DIR=build bash scripts/build.sh >/dev/null
ibvcap=$PWD/build/capture/ibvcap

work=${DEMO_DIR:-$(mktemp -d /tmp/ibvcap-demo.XXXXXX)}
mkdir -p "$work"
rm -rf "$work/out" "$work/report.json" "$work/truth.json"
mcast=(239.17.0.1:36001 239.17.0.2:36001)
# 24,000 frames of 8298 bytes at 10,000 frames/s: 2.4 s, 400 MB of output files.
traffic=(--threads 2 -c 1000 --loss 0.001 --duplicate 0.001 --reorder 0.001 --seed 1)
rate=10000

capture_pid=
testbed_up=0
cleanup() {
  if [ -n "$capture_pid" ]; then kill "$capture_pid" 2>/dev/null || true; fi
  if [ "$testbed_up" = 1 ]; then bash scripts/testbed.sh down demo >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

why=
if [ "${DEMO_LOOPBACK:-0}" = 1 ]; then
  why="DEMO_LOOPBACK=1"
elif why=$(bash scripts/testbed.sh up demo 2>&1); then
  testbed_up=1
  echo "== $why"
fi
if [ "$testbed_up" = 1 ]; then
  rx=(ip netns exec demo-rx)
  tx=(ip netns exec demo-tx)
  rx_if=demo-r
  tx_if=demo-t
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

echo "== capturing on $rx_if: ibvcap capture --source pcap -F codif -F codifhdr -F pcap -c $packets"
"${rx[@]}" "$ibvcap" capture --source pcap -i "$rx_if" -o "$work/out" -F codif -F codifhdr -F pcap \
  --report "$work/report.json" -c "$packets" --duration 60 "${mcast[@]}" >"$work/capture.log" 2>&1 &
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
  have=$("${rx[@]}" awk -v dev="$rx_if" '/^[0-9]/ { on = ($2 == dev) ; next } on { print $1 }' /proc/net/igmp)
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
printf '%-14s %10s %10s\n' "" truth ledger
for key in packets missing duplicates out_of_order; do
  printf '%-14s %10s %10s\n' "$key" "$(jq ".totals.$key" "$work/truth.json")" \
    "$(jq ".totals.$key" "$work/report.json")"
done
echo "exit code $rc (3 = loss detected, as injected); files in $work/out, report $work/report.json"
same=1
for key in packets missing duplicates out_of_order; do
  [ "$(jq ".totals.$key" "$work/truth.json")" = "$(jq ".totals.$key" "$work/report.json")" ] || same=0
done
f='[.streams[] | {group, antenna, thread, packets, missing, duplicates, out_of_order, first, last}]
   | sort_by(.group, .antenna, .thread)'
if ! diff <(jq -S "$f" "$work/report.json") <(jq -S "$f" "$work/truth.json") >/dev/null; then
  echo "demo: the per-stream ledger differs from the truth" >&2
  same=0
fi
# Every frame that arrived is in the files and nothing was lost on the way in:
# the only loss is the injected one.
lost=$(jq '.totals.nic_drops + .totals.write_drops + .totals.malformed + .totals.too_late' "$work/report.json")
if [ "$lost" != 0 ]; then
  echo "demo: the capture could not keep up: $(jq -r '.loss_reasons | join("; ")' "$work/report.json")" \
    "(run it on an idle machine)" >&2
  same=0
fi
if [ "$same" = 1 ] && [ "$rc" = 3 ]; then
  echo "demo: the ledger reproduces the injected faults exactly"
else
  echo "demo: MISMATCH between ledger and ground truth" >&2
  exit 1
fi
