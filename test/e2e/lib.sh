# shellcheck shell=bash
# Shared by the end-to-end tests (docs/architecture.md, "Testing"): sourced by each test as
#   source "$(dirname "$0")/lib.sh" "$@"      with "$@" = IBVCAP_BINARY SOURCE_DIR
#
# Every test runs on its own testbed (scripts/testbed.sh) named e2e<pid>, so
# concurrent runs never collide. The EXIT trap stops the processes the test
# started, removes the testbed and the work directory (E2E_KEEP=1 keeps the
# directory). A test either ends with "PASS name" or exits non-zero with
# "FAIL name: reason"; it is never skipped: a machine that cannot create network
# namespaces fails it, saying so.
set -euo pipefail
export LC_ALL=C # also makes $EPOCHREALTIME use a '.'

if [ $# -lt 2 ]; then
  echo "usage: $0 IBVCAP_BINARY SOURCE_DIR" >&2
  exit 2
fi
IBVCAP=$(readlink -f "$1")
SRC=$(readlink -f "$2")
TEST=$(basename "$0" .sh)
TESTBED=$SRC/scripts/testbed.sh
# At least 8 characters, so that the receive interface ("$TB-r") is 10 or more:
# /proc/net/igmp prints "%-10s:", and a 10-character name meets its colon
# ("e2e01234-r:"), which every reader of that file must handle (the demo did
# not, and failed only when the test's pid had 5 digits).
TB=$(printf 'e2e%05d' $$)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ibvcap-e2e-$TEST.XXXXXX")
CHILDREN=()
TB_UP=0
T0=${EPOCHREALTIME/./}
# The generator's CODIF frames: 64-byte header + 8192 bytes of payload.
CODIF_FRAME=8256

say() { printf '== %s: %s\n' "$TEST" "$*"; }

# fail REASON...: the reason, the tails of the logs, exit 1. (In a command
# substitution it ends only that subshell; the caller then fails on the empty
# value, and the first FAIL line is the cause.)
fail() {
  printf 'FAIL %s: %s\n' "$TEST" "$*" >&2
  [ "$BASH_SUBSHELL" = 0 ] || exit 1
  local log
  for log in "$WORK"/*.log; do
    [ -s "$log" ] || continue
    printf -- '--- %s (last 15 lines)\n' "${log##*/}" >&2
    tail -n 15 "$log" >&2
  done
  exit 1
}

# now_us: microseconds since the epoch; secs_since T_US: seconds since then, 0.01 s.
now_us() { echo "${EPOCHREALTIME/./}"; }
secs_since() {
  local d=$(($(now_us) - $1))
  printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000))
}

pass() { printf 'PASS %s (%s s)\n' "$TEST" "$(secs_since "$T0")"; }

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
  [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}

cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${CHILDREN[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in "${CHILDREN[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "$TB_UP" = 1 ]; then
    bash "$TESTBED" down "$TB" >/dev/null 2>&1 || echo "$TEST: could not remove testbed $TB" >&2
  fi
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "$TEST: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'fail "interrupted by a signal"' INT TERM

require_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || fail "'$t' is not installed: run scripts/install-deps.sh"
  done
}
require_tools ip jq tshark capinfos
[ -x "$IBVCAP" ] || fail "no ibvcap binary at $IBVCAP"

# testbed_up [--antennas N]: the testbed, and its names in TX_NS RX_NS TX_IF RX_IF RX_IP.
# shellcheck disable=SC2120 # the options are optional
testbed_up() {
  if [ "$(id -u)" -ne 0 ]; then
    fail "the e2e tests create network namespaces and need root (uid $(id -u)); CI runs them as root"
  fi
  local out ns pid
  # Testbeds of earlier e2e runs that were killed before their cleanup (a
  # ctest timeout): e2e<pid> whose test process is gone.
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^e2e[0-9]+-rx$' || true); do
    pid=${ns#e2e}
    pid=$((10#${pid%-rx}))
    kill -0 "$pid" 2>/dev/null || bash "$TESTBED" down "${ns%-rx}" >/dev/null 2>&1 || true
  done
  TB_UP=1 # from here on, cleanup removes whatever part of it exists
  if ! out=$(bash "$TESTBED" up "$TB" "$@" 2>&1); then
    fail "cannot create the network-namespace testbed on this machine: $out"
  fi
  eval "$(bash "$TESTBED" env "$TB")"
  say "$out"
}

rx() { ip netns exec "$RX_NS" "$@"; }
tx() { ip netns exec "$TX_NS" "$@"; }

# start LOG CMD...: run CMD in the background, stdout+stderr to $WORK/LOG; its
# pid in STARTED (and in CHILDREN, for cleanup). CMD may begin with rx or tx.
# With ERR_LOG=NAME set (ERR_LOG=x.log start ...), stderr goes to $WORK/NAME instead.
# The pid is that of ibvcap itself, so signals reach it: a background shell
# function would run in a subshell of its own (which ignores SIGINT), so rx/tx
# become a plain `ip netns exec NS`, and that execs the command.
start() {
  local log=$WORK/$1
  shift
  case $1 in
    rx) set -- ip netns exec "$RX_NS" "${@:2}" ;;
    tx) set -- ip netns exec "$TX_NS" "${@:2}" ;;
  esac
  if [ -n "${ERR_LOG:-}" ]; then
    "$@" >"$log" 2>"$WORK/$ERR_LOG" &
  else
    "$@" >"$log" 2>&1 &
  fi
  STARTED=$!
  CHILDREN+=("$STARTED")
}

# finish PID TIMEOUT_S (whole seconds): wait for PID to end; its exit code in RC and the
# seconds it took in WAITED. Fails when it is still running after TIMEOUT_S.
finish() {
  local pid=$1 limit=$2 t0
  t0=$(now_us)
  while kill -0 "$pid" 2>/dev/null; do
    if [ $(($(now_us) - t0)) -gt $((limit * 1000000)) ]; then
      fail "process $pid still running after ${limit} s"
    fi
    sleep 0.05
  done
  # RC and WAITED are for the caller.
  # shellcheck disable=SC2034
  RC=0
  # shellcheck disable=SC2034
  wait "$pid" || RC=$?
  # shellcheck disable=SC2034
  WAITED=$(secs_since "$t0")
}

# send_traffic TIMEOUT_S GEN_OPTION...: the test's traffic ("${GEN[@]}"
# "${MCAST[@]}") sent from the transmitting namespace by ibvcap gen --send with
# the options given (--rate, --truth); fails unless it exits 0 within TIMEOUT_S.
send_traffic() {
  local limit=$1
  shift
  start send.log tx "$IBVCAP" gen --send -i "$TX_IF" "$@" "${GEN[@]}" "${MCAST[@]}"
  finish "$STARTED" "$limit"
  expect_eq "sender exit code" "$RC" 0
}

# wait_for_file FILE TIMEOUT_S
wait_for_file() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.05
  done
  fail "$1 did not appear within $2 s"
}

# wait_for_text FILE TEXT TIMEOUT_S: until FILE holds the fixed string TEXT
# (a line the program prints after a step the test cannot see otherwise).
wait_for_text() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "$1 did not say \"$2\" within $3 s: $(head -c 500 "$1")"
}

# Frames stamped with the wall clock (gen --start-seconds N counts from gen's
# default epoch 52, 2026-01-01T00:00:00Z), and UTC instants as the CLI reads them.
EPOCH52=1767225600
utc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S; }

# first_last FILE: "FRAME SECONDS FRAME SECONDS" of a .codif file's first and
# last record (CODIF v2 word 0: the frame number, then the seconds), its
# records CODIF_FRAME bytes (set by the test).
first_last() {
  local size n
  size=$(stat -c %s "$1")
  n=$((size / CODIF_FRAME))
  [ "$n" -gt 0 ] || fail "$1 holds no frame"
  echo "$(od -An -tu4 -N8 "$1") $(od -An -tu4 -j $(((n - 1) * CODIF_FRAME)) -N8 "$1")" | xargs
}

# igmp_hex A.B.C.D: the group as /proc/net/igmp prints it (network order read
# as a little-endian word).
igmp_hex() {
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  printf '%02X%02X%02X%02X' "$d" "$c" "$b" "$a"
}

# wait_for_join PID TIMEOUT_S GROUP:PORT...: until the rx namespace's kernel holds
# a membership of every group on RX_IF, or JOIN_IF if set (the capture joins
# once its filter is in place). Fails when PID ends first or the time runs out.
wait_for_join() {
  local pid=$1 limit=$2 i g want have dev=${JOIN_IF:-$RX_IF}
  shift 2
  want=()
  for g in "$@"; do want+=("$(igmp_hex "${g%%:*}")"); done
  for ((i = 0; i < limit * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || fail "the capture ended before joining its groups"
    # shellcheck disable=SC2016 # awk's own $1, $2
    have=$(rx awk -v dev="$dev" '
      /^[0-9]/ { on = ($2 == dev || $2 == dev ":") ; next }
      on { print $1 }' /proc/net/igmp)
    local all=1
    for g in "${want[@]}"; do
      grep -qx "$g" <<<"$have" || all=0
    done
    [ "$all" = 1 ] && return 0
    sleep 0.05
  done
  fail "the capture did not join $* on $dev within $limit s (/proc/net/igmp: $(rx cat /proc/net/igmp | tr '\n\t' '  '))"
}

# j FILE FILTER: one JSON value (jq -r); fails when it is missing (null).
j() {
  local v
  v=$(jq -r "$2 | if . == null then error(\"null\") else . end" "$1" 2>/dev/null) ||
    fail "$1 has no $2 (or is not JSON)"
  printf '%s\n' "$v"
}

# gen_reference: the test's traffic ("${GEN[@]}" "${MCAST[@]}") written by
# ibvcap gen -w to $WORK/ref.pcap with its truth in $WORK/ref-truth.json; sets
# PACKETS to the truth's packet count.
gen_reference() {
  "$IBVCAP" gen -q -w "$WORK/ref.pcap" --truth "$WORK/ref-truth.json" "${GEN[@]}" "${MCAST[@]}" ||
    fail "ibvcap gen -w failed"
  PACKETS=$(j "$WORK/ref-truth.json" .totals.packets)
}

# read_reference EXPECTED_RC: ibvcap read -F codif of $WORK/ref.pcap into
# $WORK/ref (log: ref-read.log), which must exit EXPECTED_RC.
read_reference() {
  local rc=0
  "$IBVCAP" read -q -r "$WORK/ref.pcap" -F codif -o "$WORK/ref" >"$WORK/ref-read.log" 2>&1 || rc=$?
  expect_eq "exit code of ibvcap read on the reference" "$rc" "$1"
}

# codif_match_reference DIR COUNT: DIR holds exactly COUNT .codif files, each
# byte-identical to the file of the same name in $WORK/ref.
codif_match_reference() {
  local dir=$1 want=$2 ref out n=0
  for ref in "$WORK"/ref/*.codif; do
    out=$dir/${ref##*/}
    [ -e "$out" ] || fail "no ${ref##*/} in $dir"
    cmp -s "$ref" "$out" || fail "$out differs from the reference: $(cmp "$ref" "$out" 2>&1 | head -1)"
    n=$((n + 1))
  done
  expect_eq "codif files compared with $dir" "$n" "$want"
  expect_eq "codif files in $dir" "$(find "$dir" -name '*.codif' | wc -l)" "$want"
}

# streams_match REPORT TRUTH: every stream of the report equals the truth on
# packets, missing, duplicates, out_of_order, first, last (docs/formats.md, "Worked example").
streams_match() {
  local f='[.streams[] | {group, antenna, thread, packets, missing, duplicates, out_of_order, first, last}]
           | sort_by(.group, .antenna, .thread)'
  if ! diff <(jq -S "$f" "$1") <(jq -S "$f" "$2") >"$WORK/streams.diff"; then
    fail "the report's streams differ from the truth: $(head -c 2000 "$WORK/streams.diff")"
  fi
}

# tshark_clean PCAP: tshark reads the whole file without an error or a warning.
tshark_clean() {
  local rc=0 err
  tshark -n -r "$1" -q >/dev/null 2>"$WORK/tshark.err" || rc=$?
  # tshark's only allowed remark is its notice about running as root.
  err=$(grep -v '^Running as user "root" and group "root". This could be dangerous.$' "$WORK/tshark.err" | tr '\n' ' ' || true)
  [ "$rc" = 0 ] || fail "tshark cannot read $1 (exit $rc, $(stat -c %s "$1") bytes): $err"
  [ -z "$err" ] || fail "tshark complains about $1: $err"
}

# pcap_frames PCAP: the number of records (capinfos).
pcap_frames() {
  capinfos -M -c -r -T "$1" 2>/dev/null | awk -F'\t' 'NF >= 2 { print $2; exit }'
}

# codif_whole DIR: every .codif file in DIR is a whole number of CODIF frames;
# prints the number of files checked.
codif_whole() {
  local f n=0 size
  for f in "$1"/*.codif; do
    [ -e "$f" ] || continue
    size=$(stat -c %s "$f")
    if [ $((size % CODIF_FRAME)) != 0 ]; then
      fail "$f is $size bytes: not a whole number of $CODIF_FRAME-byte CODIF frames" \
        "(it ends $((size % CODIF_FRAME)) bytes into a frame$([ $((size % 4096)) = 0 ] && echo ", at a page boundary: a write cut short"))"
    fi
    n=$((n + 1))
  done
  echo "$n"
}

# outputs_match_files REPORT: each output's packets and bytes in the report equal
# what its file holds (size / frame size for codif, records for pcap).
outputs_match_files() {
  local path format packets bytes size frames
  while IFS=$'\t' read -r path format packets bytes; do
    [ -e "$path" ] || fail "the report names $path, which does not exist"
    size=$(stat -c %s "$path")
    expect_eq "bytes of $path in the report" "$bytes" "$size"
    case $format in
      codif) frames=$((size / CODIF_FRAME)) ;;
      pcap | pcapng) frames=$(pcap_frames "$path") ;;
      *) continue ;;
    esac
    expect_eq "packets of $path in the report" "$packets" "$frames"
  done < <(jq -r '.outputs[] | [.path, .format, .packets, .bytes] | @tsv' "$1")
}
