#!/usr/bin/env bash
# e2e errors: live capture and live sending fail loudly, with one line that
# names the cause (and the fix), and the contract's exit code (1 runtime, 2 usage):
#   capture on a nonexistent interface            -> 1
#   capture on an interface that is down          -> 1, naming `ip link set IF up`
#   capture of a non-multicast group / of port 0  -> 2
#   capture --source pcap without -i              -> 2
#   gen --send from an antenna address not on the host -> 1, naming `ip addr add`
#   gen --send on a nonexistent interface         -> 1
#   the interface removed during a capture        -> 1 within 5 s, one line, the
#                                                    report kept with the error
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

testbed_up

# expect_error WHAT CODE REGEX CMD...: CMD exits CODE within 20 s, with exactly
# one line on stderr matching REGEX (extended, case-sensitive).
expect_error() {
  local what=$1 code=$2 regex=$3 rc=0
  shift 3
  case $1 in # rx/tx are shell functions, which timeout cannot run
    rx) set -- ip netns exec "$RX_NS" "${@:2}" ;;
    tx) set -- ip netns exec "$TX_NS" "${@:2}" ;;
  esac
  timeout 20 "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
  [ "$rc" != 124 ] || fail "$what: still running after 20 s"
  local err lines
  err=$(cat "$WORK/err.txt")
  lines=$(wc -l <"$WORK/err.txt")
  expect_eq "$what: exit code (stderr: $err)" "$rc" "$code"
  expect_eq "$what: lines on stderr (stderr: $err)" "$lines" 1
  grep -Eq -- "$regex" "$WORK/err.txt" || fail "$what: stderr does not match /$regex/: $err"
  say "$what -> exit $rc: $err"
}

G=239.17.0.1:36001
CAP=(capture --source pcap --duration 5)
expect_error "capture on a nonexistent interface" 1 "e2e-nosuch" \
  rx "$IBVCAP" "${CAP[@]}" -i e2e-nosuch "$G"

# A veth pair of our own inside the rx namespace, with an address, left down.
DOWN_IF=$TB-d0
ip -n "$RX_NS" link add "$DOWN_IF" type veth peer name "$TB-d1"
ip -n "$RX_NS" addr add 10.0.9.1/24 dev "$DOWN_IF"
expect_error "capture on an interface that is down" 1 "ip link set (dev )?$DOWN_IF up" \
  rx "$IBVCAP" "${CAP[@]}" -i "$DOWN_IF" "$G"

expect_error "capture of a non-multicast group" 2 "10\.0\.0\.5.*not a multicast address" \
  rx "$IBVCAP" "${CAP[@]}" -i "$RX_IF" 10.0.0.5:36001
expect_error "capture of port 0" 2 "port must be 1-65535" \
  rx "$IBVCAP" "${CAP[@]}" -i "$RX_IF" 239.17.0.1:0
expect_error "capture --source pcap without -i" 2 "-i IF is required" \
  rx "$IBVCAP" "${CAP[@]}" "$G"

expect_error "gen --send from an antenna that is not local" 1 "10\.0\.0\.99.*ip addr add|ip addr add.*10\.0\.0\.99" \
  tx "$IBVCAP" gen --send -i "$TX_IF" --antenna 10.0.0.99 -c 10 "$G"
expect_error "gen --send --antennas 7 on a host with 6" 1 "10\.0\.0\.17.*ip addr add|ip addr add.*10\.0\.0\.17" \
  tx "$IBVCAP" gen --send -i "$TX_IF" --antennas 7 -c 10 "$G"
expect_error "gen --send on a nonexistent interface" 1 "e2e-nosuch" \
  tx "$IBVCAP" gen --send -i e2e-nosuch -c 10 "$G"

# Another veth pair of our own, up, captured on, then deleted under the capture.
GONE_IF=$TB-g0
ip -n "$RX_NS" link add "$GONE_IF" type veth peer name "$TB-g1"
ip -n "$RX_NS" addr add 10.0.8.1/24 dev "$GONE_IF"
ip -n "$RX_NS" link set "$GONE_IF" up
ip -n "$RX_NS" link set "$TB-g1" up
start gone.log rx "$IBVCAP" capture --source pcap -i "$GONE_IF" --duration 60 --report "$WORK/gone.json" "$G"
JOIN_IF=$GONE_IF wait_for_join "$STARTED" 15 "$G"
ip -n "$RX_NS" link del "$GONE_IF"
finish "$STARTED" 5
expect_eq "exit code when the interface is removed during the capture" "$RC" 1
line=$(grep "^ibvcap capture: capture on $GONE_IF" "$WORK/gone.log" || true)
[ -n "$line" ] || fail "no error line naming $GONE_IF: $(cat "$WORK/gone.log")"
expect_eq "error lines naming $GONE_IF" "$(wc -l <<<"$line")" 1
grep -q "disappeared" <<<"$line" || fail "the error does not say that $GONE_IF disappeared: $line"
expect_eq "verdict when the interface is removed" "$(j "$WORK/gone.json" .verdict)" loss
j "$WORK/gone.json" .error >/dev/null
say "interface removed during the capture -> exit 1 after $WAITED s: $line"
pass
