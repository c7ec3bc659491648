#!/usr/bin/env bash
# The highest packet rate that `ibvcap capture --source pcap` captures without
# loss, against tcpdump on the same traffic in the same run, over the namespace
# testbed (scripts/testbed.sh). See bench/README.md.
#
#   bench/lossless_rate.sh [--packets N] [--payload BYTES] [--start PPS] [--max PPS]
#                          [--bisect N] [--budget SECONDS] [--ibvcap PATH]
#                          [--confirm-factor F] [--confirm-packets N] [--json FILE]
#                          [--ibvcap-opt ARG]...
#
# Each trial sends --packets frames (default 100,000; 24 streams: 6 antennas x
# 2 CODIF threads x 2 groups) with `ibvcap gen --send --rate R` and captures
# them with one tool writing a pcap file:
#   ibvcap:  ibvcap capture --source pcap -i IF -F pcap -c N GROUP:PORT...
#            lossless = exit 0, verdict zero-loss and every frame counted;
#   tcpdump: tcpdump -B 262144 -w FILE -i IF FILTER (the same 256 MiB kernel
#            ring, the same BPF filter for the two GROUP:PORTs)
#            lossless = every frame in FILE and "0 packets dropped by kernel".
# Rates double from --start (10,000) while both tools stay lossless, up to --max,
# then each tool's rate is bisected between its last lossless and first lossy
# rate (--bisect steps, default 4). --budget (default 600 s) bounds the whole run:
# no trial starts that would end after it. The last line is
#   ibvcap lossless rate: X pps; tcpdump lossless rate: Y pps; ratio X/Y = Z
# One trial per rate: repeat the run to see the spread.
# --confirm-factor F (e.g. 2) then runs one more ibvcap trial, of
# --confirm-packets frames (default --packets), at F times tcpdump's lossless
# rate, and prints
#   ibvcap at Fx tcpdump's lossless rate: ... lossless|LOSS|NOT PROVEN
# (NOT PROVEN: the sender did not reach that rate, or tcpdump had no lossless
# rate). --json FILE writes the figures for bench/run.sh. --ibvcap-opt ARG
# (repeatable) adds ARG to ibvcap's capture command, e.g. --direct-io.
# Exit status: 0 when the trials ran (whatever they found), 1 when something
# broke, 2 on bad usage.
set -euo pipefail
export LC_ALL=C # also makes $EPOCHREALTIME use a '.'
cd "$(dirname "$0")/.."

packets=100000
payload=8192
start_rate=10000
max_rate=1280000
bisect=4
budget=600
ibvcap=${IBVCAP:-$PWD/build/capture/ibvcap}
confirm_factor=0
confirm_packets=
json=
ibvcap_opts=()
usage() {
  sed -n '6,9p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --packets) packets=$2 ;;
    --payload) payload=$2 ;;
    --start) start_rate=$2 ;;
    --max) max_rate=$2 ;;
    --bisect) bisect=$2 ;;
    --budget) budget=$2 ;;
    --ibvcap) ibvcap=$2 ;;
    --confirm-factor) confirm_factor=$2 ;;
    --confirm-packets) confirm_packets=$2 ;;
    --json) json=$2 ;;
    --ibvcap-opt) ibvcap_opts+=("$2") ;;
    *) usage ;;
  esac
  shift 2
done
confirm_packets=${confirm_packets:-$packets}
for v in "$packets" "$payload" "$start_rate" "$max_rate" "$bisect" "$budget" "$confirm_factor" \
  "$confirm_packets"; do
  case $v in '' | *[!0-9]*) usage ;; esac
done

for t in ip jq tcpdump capinfos; do
  command -v "$t" >/dev/null || { echo "lossless_rate: '$t' is not installed: run scripts/install-deps.sh" >&2; exit 1; }
done
if [ ! -x "$ibvcap" ]; then
  echo "lossless_rate: building $ibvcap"
  BUILD_DIR=build bash scripts/build.sh -DIBVCAP_BUILD_BENCH=OFF >/dev/null
fi

mcast=(239.17.0.1:36001 239.17.0.2:36001)
streams=24
frame_bytes=$((42 + 64 + payload))
# set_volume N: the trials send N frames (rounded up to whole slots of the 24 streams).
set_volume() {
  per_stream=$((($1 + streams - 1) / streams))
  total=$((per_stream * streams))
  send=(--antennas 6 --threads 2 -c "$per_stream" --payload "$payload")
}
set_volume "$packets"
# tcpdump gets the kernel filter ibvcap sets for its GROUP:PORTs (lib/sources/pcap_live.hpp),
# so that neither sees the IGMP reports on the link (a report the kernel repeats
# after the previous trial's leave would otherwise count as an extra frame).
filter="udp and ((dst host 239.17.0.1 and dst port 36001) or (dst host 239.17.0.2 and dst port 36001))"

tb=lrate$$
work=$(mktemp -d "${TMPDIR:-/tmp}/ibvcap-lossless-rate.XXXXXX")
child=
cleanup() {
  if [ -n "$child" ]; then kill -KILL "$child" 2>/dev/null || true; fi
  bash scripts/testbed.sh down "$tb" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
if ! out=$(bash scripts/testbed.sh up "$tb" 2>&1); then
  echo "lossless_rate: cannot create the namespace testbed: $out" >&2
  exit 1
fi
eval "$(bash scripts/testbed.sh env "$tb")"
rx=(ip netns exec "$RX_NS")
tx=(ip netns exec "$TX_NS")

now_us() { echo "${EPOCHREALTIME/./}"; }
t_start=$(now_us)
elapsed() { echo $((($(now_us) - t_start) / 1000000)); }

# igmp_joined: the rx namespace holds both groups on RX_IF.
igmp_joined() {
  local have
  # shellcheck disable=SC2016 # awk's own fields
  have=$("${rx[@]}" awk -v dev="$RX_IF" '/^[0-9]/ { on = ($2 == dev || $2 == dev ":"); next } on { print $1 }' /proc/net/igmp)
  grep -qx 010011EF <<<"$have" && grep -qx 020011EF <<<"$have"
}

# send_traffic RATE: sends; sets SENT_PPS (the rate achieved).
send_traffic() {
  local t0 us
  t0=$(now_us)
  "${tx[@]}" "$ibvcap" gen --send -q -i "$TX_IF" --rate "$1" "${send[@]}" "${mcast[@]}" >"$work/send.log" 2>&1 ||
    { cat "$work/send.log" >&2; echo "lossless_rate: the sender failed" >&2; exit 1; }
  us=$(($(now_us) - t0))
  SENT_PPS=$((total * 1000000 / (us > 0 ? us : 1)))
}

# wait_child SECONDS: wait for $child, SIGINT it after SECONDS; its exit code in RC.
wait_child() {
  local i
  for ((i = 0; i < $1 * 20; i++)); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.05
  done
  kill -INT "$child" 2>/dev/null || true
  RC=0
  wait "$child" || RC=$?
  child=
}

# trial_ibvcap RATE / trial_tcpdump RATE: one trial; PASS=1 when lossless,
# CAUGHT (frames captured) and DROPS (frames counted as lost) for the table.
trial_ibvcap() {
  local dir=$work/t r
  rm -rf "$dir"
  "${rx[@]}" "$ibvcap" capture --source pcap -i "$RX_IF" -o "$dir" -F pcap --report "$work/r.json" \
    -c "$total" --duration $((total / $1 + 30)) -q "${ibvcap_opts[@]}" "${mcast[@]}" >"$work/capture.log" 2>&1 &
  child=$!
  local i
  for ((i = 0; i < 200; i++)); do
    igmp_joined && break
    kill -0 "$child" 2>/dev/null || break
    sleep 0.05
  done
  igmp_joined || { cat "$work/capture.log" >&2; echo "lossless_rate: the capture did not start" >&2; exit 1; }
  send_traffic "$1"
  wait_child 5
  r=$work/r.json
  [ -s "$r" ] || { cat "$work/capture.log" >&2; echo "lossless_rate: no report (exit $RC)" >&2; exit 1; }
  CAUGHT=$(jq .totals.codif "$r")
  # Frames sent that are not in the file (missing and kernel drops are mostly
  # the same frames: the breakdown is in DETAIL).
  DROPS=$(jq --argjson sent "$total" '[$sent - .totals.written, 0] | max' "$r")
  DETAIL=$(jq -r '.totals | "\(.missing) missing, \(.nic_drops) kernel drops, \(.write_drops) not written, \(.malformed) malformed"' "$r")
  PASS=0
  if [ "$RC" = 0 ] && [ "$(jq -r .verdict "$r")" = zero-loss ] && [ "$CAUGHT" = "$total" ]; then PASS=1; fi
  rm -rf "$dir" "$r"
}

trial_tcpdump() {
  local f=$work/t.pcap i
  rm -f "$f"
  "${rx[@]}" tcpdump -n -B 262144 -i "$RX_IF" -w "$f" "$filter" >"$work/tcpdump.log" 2>&1 &
  child=$!
  for ((i = 0; i < 200; i++)); do
    grep -q 'listening on' "$work/tcpdump.log" && break
    kill -0 "$child" 2>/dev/null || break
    sleep 0.05
  done
  grep -q 'listening on' "$work/tcpdump.log" || { cat "$work/tcpdump.log" >&2; echo "lossless_rate: tcpdump did not start" >&2; exit 1; }
  send_traffic "$1"
  sleep 1
  wait_child 0
  CAUGHT=$(capinfos -M -c -r -T "$f" | awk -F'\t' '{ print $2; exit }')
  DROPS=$(awk '/packets dropped by kernel/ { print $1 }' "$work/tcpdump.log")
  DROPS=${DROPS:-?}
  DETAIL=
  PASS=0
  if [ "$CAUGHT" = "$total" ] && [ "$DROPS" = 0 ]; then PASS=1; fi
  rm -f "$f"
}

SHORT=0
declare -A pass_rate fail_rate limited
pass_rate=([ibvcap]=0 [tcpdump]=0)
fail_rate=([ibvcap]=0 [tcpdump]=0)
limited=([ibvcap]=0 [tcpdump]=0)

# trial TOOL RATE: runs it (unless over budget: returns 1), prints a table row
# and moves TOOL's pass/fail bounds.
trial() {
  local tool=$1 rate=$2 est=$(($2 > 0 ? total / $2 + 8 : 8))
  if [ $(($(elapsed) + est)) -gt "$budget" ]; then
    echo "(budget of $budget s reached: no $tool trial at $rate pps)"
    return 1
  fi
  "trial_$tool" "$rate"
  local verdict=lossless note="" shown=""
  [ "$PASS" = 1 ] || verdict=LOSS
  SHORT=0
  if [ $((SENT_PPS * 10)) -lt $((rate * 9)) ]; then
    note="sender reached only $SENT_PPS pps"
    SHORT=1
  fi
  shown=$note
  # ibvcap's losses by kind.
  if [ "$PASS" != 1 ] && [ -n "$DETAIL" ]; then shown="$DETAIL${note:+; $note}"; fi
  printf '%10s %10s  %-8s %9s/%-9s %8s  %-8s %s\n' "$rate" "$SENT_PPS" "$tool" "$CAUGHT" "$total" "$DROPS" "$verdict" "$shown"
  if [ "$PASS" = 1 ]; then
    # A lossless trial at a rate the sender did not reach proves only the rate sent.
    if [ -n "$note" ]; then
      [ "$SENT_PPS" -gt "${pass_rate[$tool]}" ] && pass_rate[$tool]=$SENT_PPS
      limited[$tool]=1
    else
      [ "$rate" -gt "${pass_rate[$tool]}" ] && pass_rate[$tool]=$rate
    fi
  elif [ "${fail_rate[$tool]}" = 0 ] || [ "$rate" -lt "${fail_rate[$tool]}" ]; then
    fail_rate[$tool]=$rate
  fi
  return 0
}

echo "lossless_rate: $total frames of $frame_bytes bytes per trial (24 streams x $per_stream), over $TX_IF -> $RX_IF (veth, MTU 9000); budget $budget s"
if [ ${#ibvcap_opts[@]} -gt 0 ]; then echo "ibvcap capture options added: ${ibvcap_opts[*]}"; fi
printf '%10s %10s  %-8s %19s %8s  %-8s %s\n' "rate" "sent pps" "tool" "captured/sent" "dropped" "result" ""
rate=$start_rate
over=0
while [ "$rate" -le "$max_rate" ] && [ "$over" = 0 ]; do
  active=0
  for tool in ibvcap tcpdump; do
    if [ "${fail_rate[$tool]}" = 0 ] && [ "${limited[$tool]}" = 0 ]; then
      active=1
      trial "$tool" "$rate" || { over=1; break; }
    fi
  done
  [ "$active" = 1 ] || break
  rate=$((rate * 2))
done
for tool in ibvcap tcpdump; do
  for ((step = 0; step < bisect && over == 0; step++)); do
    lo=${pass_rate[$tool]} hi=${fail_rate[$tool]}
    [ "$hi" -gt 0 ] || break
    # Stop when the bracket is within 5% (and 1000 pps).
    [ $((hi - lo)) -gt $((lo / 20 > 1000 ? lo / 20 : 1000)) ] || break
    mid=$(((lo + hi) / 2 / 1000 * 1000))
    [ "$mid" -gt "$lo" ] || break
    trial "$tool" "$mid" || over=1
    # The sender cannot drive this rate: a finer bracket would measure the sender.
    [ "$SHORT" = 0 ] || break
  done
done

x=${pass_rate[ibvcap]}
y=${pass_rate[tcpdump]}
show() { # show TOOL: its rate, marked >= when it never lost a frame
  local tool=$1
  if [ "${fail_rate[$tool]}" = 0 ]; then printf '>=%s' "${pass_rate[$tool]}"; else printf '%s' "${pass_rate[$tool]}"; fi
}
if [ "$y" -gt 0 ]; then
  ratio=$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.2f", x / y }')
else
  ratio="n/a (tcpdump lost frames at every rate tried)"
fi
echo "elapsed $(elapsed) s; a rate marked >= is a lower bound (no loss at the highest rate tried or sent)"
if [ "${fail_rate[ibvcap]}" = 0 ] || [ "${fail_rate[tcpdump]}" = 0 ]; then
  echo "note: a lower bound makes the ratio a bound too: the sender, not the capture, was the limit"
fi
echo "ibvcap lossless rate: $(show ibvcap) pps; tcpdump lossless rate: $(show tcpdump) pps; ratio X/Y = $ratio"

# The confirmation: one ibvcap trial of --confirm-packets frames at F times
# tcpdump's lossless rate. It runs whatever the budget says: it is the goal.
confirm_json=null
if [ "$confirm_factor" -gt 0 ]; then
  if [ "$y" -gt 0 ]; then
    target=$((y * confirm_factor))
    set_volume "$confirm_packets"
    echo "confirm: ibvcap, $total frames ($((total * frame_bytes / 1000000)) MB) at ${confirm_factor}x tcpdump's lossless rate = $target pps"
    trial_ibvcap "$target"
    short=false
    [ $((SENT_PPS * 10)) -ge $((target * 9)) ] || short=true
    if [ "$PASS" = 1 ] && [ "$short" = false ]; then
      result=lossless
    elif [ "$PASS" = 1 ]; then
      result="NOT PROVEN (lossless, but the sender reached only $SENT_PPS pps)"
    else
      result="LOSS ($DETAIL)"
    fi
    printf '%10s %10s  %-8s %9s/%-9s %8s  %s\n' "$target" "$SENT_PPS" ibvcap "$CAUGHT" "$total" "$DROPS" "$result"
    echo "ibvcap at ${confirm_factor}x tcpdump's lossless rate: $target pps asked, $SENT_PPS sent, $CAUGHT/$total frames of $frame_bytes bytes ($((total * frame_bytes / 1000000)) MB), $DROPS dropped: $result"
    confirm_json=$(jq -n --argjson factor "$confirm_factor" --argjson rate "$target" \
      --argjson sent "$SENT_PPS" --argjson packets "$total" --argjson bytes $((total * frame_bytes)) \
      --argjson captured "${CAUGHT:-0}" --arg dropped "$DROPS" --argjson pass "$PASS" \
      --argjson short "$short" \
      '{factor: $factor, rate: $rate, sent_pps: $sent, packets: $packets, bytes: $bytes,
        captured: $captured, dropped: ($dropped | tonumber? // $dropped), lossless: ($pass == 1), sender_short: $short}')
  else
    echo "ibvcap at ${confirm_factor}x tcpdump's lossless rate: NOT PROVEN (tcpdump was lossless at no rate tried)"
    confirm_json='{"lossless": false, "sender_short": false, "rate": 0, "reason": "tcpdump had no lossless rate"}'
  fi
fi
if [ -n "$json" ]; then
  bound() { if [ "${fail_rate[$1]}" = 0 ]; then echo true; else echo false; fi; }
  jq -n --argjson frame_bytes "$frame_bytes" --argjson packets "$packets" \
    --argjson ir "$x" --argjson ib "$(bound ibvcap)" --argjson tr "$y" --argjson tb "$(bound tcpdump)" \
    --argjson confirm "$confirm_json" --argjson elapsed "$(elapsed)" \
    '{frame_bytes: $frame_bytes, packets_per_trial: $packets, elapsed_s: $elapsed,
      ibvcap: {rate: $ir, lower_bound: $ib}, tcpdump: {rate: $tr, lower_bound: $tb},
      ratio: (if $tr > 0 then $ir / $tr else null end), confirm: $confirm}' >"$json"
fi
