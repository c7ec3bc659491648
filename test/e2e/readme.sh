#!/usr/bin/env bash
# e2e readme (issue 25 item 10): the README's "Using it" block, run as
# written, line by line, in an empty directory, with `ibvcap` the binary
# under test. Each line's exit code is the one the block promises: gen,
# devices and verify 0; read and merge 3 (the faults gen injected are loss); the live
# libpcap capture on lo 3 (nothing sent: no stream frames). On a host without
# an RDMA NIC the mlx5 lines each fail in one line naming the cause (exit 1)
# and leave no -o directory behind ("a capture that fails before it starts
# leaves no empty -o directory"). /data and /var/lib/prometheus are made
# relative to the work directory, so the test writes nowhere else. Needs
# root (the live line). Seconds; no namespace.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
[ "$(id -u)" = 0 ] || fail "needs root: the README's live line captures on lo (CI runs as root)"
[ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ] ||
  fail "this host has RDMA devices: the README's mlx5 lines would capture; run it where none is"

# The block: the ```sh fence after "## Using it", continuation lines joined.
mapfile -t LINES < <(awk '
  /^## Using it/ { section = 1; next }
  section && /^## / { exit }
  section && /^```sh/ { inblock = 1; next }
  inblock && /^```/ { exit }
  inblock {
    if (sub(/\\$/, "")) { cont = cont $0; next }
    line = cont $0; cont = ""
    if (line ~ /^[[:space:]]*(#|$)/) next
    print line
  }' "$SRC/README.md")
[ "${#LINES[@]}" -ge 10 ] || fail "found ${#LINES[@]} commands in README.md's \"Using it\" block"

# (node_exporter's textfile directory, as a host that runs it has)
mkdir -p "$WORK/bin" "$WORK/run/docs/examples" "$WORK/run/var/lib/prometheus/node-exporter"
ln -s "$IBVCAP" "$WORK/bin/ibvcap"
cp "$SRC/docs/examples/expect.json" "$WORK/run/docs/examples/"
cd "$WORK/run"
# The exit code each line must give; the mlx5 lines: 1, one line, no RDMA devices.
expected_rc() {
  case $1 in
    "ibvcap gen "* | "echo "* | "ibvcap devices"* | "ibvcap verify "*) echo 0 ;;
    "ibvcap read "* | "ibvcap capture --source pcap "* | "ibvcap merge "*) echo 3 ;;
    *"-i ens1f0np0"*) echo mlx5 ;;
    *) echo unknown ;;
  esac
}
n=0 last=0
for line in "${LINES[@]}"; do
  n=$((n + 1))
  # Nothing outside the work directory.
  cmd=${line//\/data/data}
  cmd=${cmd//\/var\/lib\/prometheus/var\/lib\/prometheus}
  want=$(expected_rc "$cmd")
  [ "$want" != unknown ] || fail "README line $n has no expected exit code in this test: $line"
  say "$line"
  rc=0
  # (last: the status the block's `echo $?` prints, the previous line's.)
  PATH="$WORK/bin:$PATH" bash -c "(exit $last); $cmd" >"$WORK/line$n.out" 2>"$WORK/line$n.err" || rc=$?
  last=$rc
  if [ "$want" = mlx5 ] && [[ $cmd == "ibvcap doctor "* ]]; then
    # The preflight: its checks on stdout, the interface's FAIL among them.
    expect_eq "exit code of README line $n ($line)" "$rc" 1
    grep -Eq '^FAIL +interface ens1f0np0: ' "$WORK/line$n.out" ||
      fail "README line $n did not FAIL the interface: $(cat "$WORK/line$n.out")"
  elif [ "$want" = mlx5 ]; then
    expect_eq "exit code of README line $n ($line): $(tr '\n' '|' <"$WORK/line$n.err")" "$rc" 1
    expect_eq "stderr lines of README line $n: $(cat "$WORK/line$n.err")" "$(wc -l <"$WORK/line$n.err")" 1
    grep -q "no RDMA devices found" "$WORK/line$n.err" ||
      fail "README line $n did not name the cause: $(cat "$WORK/line$n.err")"
    out=$(grep -o -- '-o [^ ]*' <<<"$cmd" | cut -d' ' -f2)
    [ ! -e "$out" ] || fail "README line $n failed before it started and left its -o directory $out: $(ls -la "$out")"
  else
    expect_eq "exit code of README line $n ($line): $(tail -c 300 "$WORK/line$n.err" | tr '\n' '|')" "$rc" "$want"
  fi
done
# The echo line printed the read's exit code.
grep -qx '3' "$WORK"/line*.out || fail "the block's 'echo \$?' did not print 3 after the read"
pass
