#!/usr/bin/env bash
# e2e privileges: least privilege at run time (docs/operations.md,
# "Capabilities"). A live capture (--source pcap, 2 streams x 2000 frames)
# started as root must, once its socket and joins exist, hold no capability
# on any thread: CapEff, CapPrm, CapAmb and CapInh of every
# /proc/PID/task/*/status read while it runs are zero and NoNewPrivs is 1, and
# its report says so ("privileges"). With --user nobody it also runs as nobody
# after setup and still captures everything (the rotated files and the report
# are made as nobody). --user with a user that does not exist is refused with
# one line and exit 1 before anything is set up.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

MCAST=(239.17.0.1:36001)
GEN=(--antennas 1 --threads 2 -c 2000 --payload 1024)
PACKETS=4000

# caps_gone PID TIMEOUT_S: until every thread of PID shows empty capability
# sets and NoNewPrivs 1; fails with the last reading otherwise.
caps_gone() {
  local pid=$1 limit=$2 i sets
  for ((i = 0; i < limit * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || fail "the capture ended before its capabilities were read"
    sets=$(cat /proc/"$pid"/task/*/status 2>/dev/null |
      awk '/^(CapEff|CapPrm|CapAmb|CapInh):/ && $2 != "0000000000000000" { bad++ }
           /^NoNewPrivs:/ && $2 != 1 { bad++ } /^CapEff:/ { threads++ }
           END { printf "%d %d", bad, threads }')
    if [ "${sets% *}" = 0 ] && [ "${sets#* }" -gt 1 ]; then
      say "pid $pid: ${sets#* } threads, every capability set empty, NoNewPrivs 1"
      return 0
    fi
    sleep 0.05
  done
  fail "pid $pid still holds capabilities after $limit s: $(grep -h -E '^(Cap|NoNew)' /proc/"$pid"/task/*/status | sort | uniq -c | tr '\n' ' ')"
}

testbed_up

# 1. As root: every capability is gone once the capture is set up.
start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q -o "$WORK/out" -F codif \
  --report "$WORK/r.json" -c "$PACKETS" --duration 60 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
caps_gone "$CAPTURE" 5
send_traffic 30 --rate 8000
finish "$CAPTURE" 30
expect_eq "capture exit code (0 = zero-loss)" "$RC" 0
R=$WORK/r.json
expect_eq "privileges.dropped" "$(j "$R" .privileges.dropped)" true
expect_eq "privileges.no_new_privs" "$(j "$R" .privileges.no_new_privs)" true
expect_eq "privileges.kept" "$(j "$R" '.privileges.kept | length')" 0
expect_eq "privileges.after.CapEff" "$(j "$R" .privileges.after.CapEff)" 0000000000000000
expect_eq "privileges.after.CapPrm" "$(j "$R" .privileges.after.CapPrm)" 0000000000000000
expect_eq "privileges.after.CapAmb" "$(j "$R" .privileges.after.CapAmb)" 0000000000000000
expect_eq "privileges.user" "$(j "$R" .privileges.user)" root
grep -q "privileges: every capability dropped after setup" "$WORK/capture.log" ||
  fail "the summary does not say the capabilities were dropped"

# 2. --user nobody: the same, as nobody after setup; rotated files (-C 1: a
# new file every MB) and the report are made as nobody.
chmod 0711 "$WORK"
mkdir -p "$WORK/nobody/out"
chown -R nobody "$WORK/nobody"
start capture2.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q -o "$WORK/nobody/out" \
  -F codif -C 1 --report "$WORK/nobody/r.json" --user nobody -c "$PACKETS" --duration 60 \
  "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
caps_gone "$CAPTURE" 5
expect_eq "uid of the running capture" "$(awk '/^Uid:/ { print $2 }' /proc/"$CAPTURE"/status)" \
  "$(id -u nobody)"
send_traffic 30 --rate 8000
finish "$CAPTURE" 30
expect_eq "capture --user nobody exit code" "$RC" 0
R=$WORK/nobody/r.json
expect_eq "privileges.user" "$(j "$R" .privileges.user)" nobody
expect_eq "report's owner" "$(stat -c %U "$R")" nobody
expect_eq "packets" "$(j "$R" .totals.packets)" "$PACKETS"
files=$(find "$WORK/nobody/out" -name '*.codif' -user nobody | wc -l)
[ "$files" -ge 2 ] || fail "expected rotated .codif files made as nobody, found $files"

# 3. --user nobody with an output directory nobody cannot write: refused right
# after setup (exit 1, one line naming the directory), never a half run.
mkdir -m 0755 "$WORK/rootonly"
rc=0
rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q -o "$WORK/rootonly" -F codif --user nobody \
  -c 1 --duration 10 "${MCAST[@]}" >"$WORK/rootonly.log" 2>&1 || rc=$?
expect_eq "--user nobody into a root-only directory: exit code" "$rc" 1
grep -q "$WORK/rootonly is not writable by uid $(id -u nobody)" "$WORK/rootonly.log" ||
  fail "no line naming the unwritable directory: $(cat "$WORK/rootonly.log")"

# 4. A user that does not exist: one line, exit 1, nothing set up.
rc=0
rx "$IBVCAP" capture --source pcap -i "$RX_IF" -q -o "$WORK/nouser" -F codif \
  --user ibvcap-no-such-user -c 1 "${MCAST[@]}" >"$WORK/nouser.log" 2>&1 || rc=$?
expect_eq "--user ibvcap-no-such-user exit code" "$rc" 1
expect_eq "--user ibvcap-no-such-user lines" "$(wc -l <"$WORK/nouser.log")" 1
grep -q "no such user" "$WORK/nouser.log" || fail "unexpected message: $(cat "$WORK/nouser.log")"
[ ! -e "$WORK/nouser" ] || fail "a refused capture made its output directory"
pass
