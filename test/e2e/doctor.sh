#!/usr/bin/env bash
# e2e doctor: the real `ibvcap doctor` on this host (CI: no RDMA device, no GPU).
#   every line is "PASS|WARN|FAIL  <check>[ <subject>]: <found>[; <fix>]"; stderr
#   is empty; exit 1 exactly when a line FAILs, 0 otherwise
#   --json is the same checks (jq): same order, same statuses, fix null iff PASS
#   -i lo: the interface checks run on it
#   --gpu 0 without an NVIDIA GPU, -o under a regular file -> a FAIL line, exit 1
#   --sysfs-root/--procfs-root: a fake mlx5 port with MTU 1500 -> FAIL mtu, exit 1
#   a bad option value -> exit 2, one line on stderr
# No network namespace, nothing sent: a few seconds.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

LINE_RE='^(PASS|WARN|FAIL)  [a-z][a-z_ ]*( [^ ]+)*: [^ ].*$'

# run_doctor NAME ARGS...: ibvcap doctor ARGS, stdout in $WORK/NAME.out,
# stderr in $WORK/NAME.err, the exit code in RC.
run_doctor() {
  local name=$1
  shift
  RC=0
  timeout 30 "$IBVCAP" doctor "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || RC=$?
  [ "$RC" != 124 ] || fail "doctor $*: still running after 30 s"
}

# check_lines NAME: every line has the format; the exit code agrees with the FAILs.
check_lines() {
  local name=$1 bad fails
  [ -s "$WORK/$name.out" ] || fail "$name: no output"
  bad=$(grep -Ev "$LINE_RE" "$WORK/$name.out" || true)
  [ -z "$bad" ] || fail "$name: lines not in the format: $bad"
  [ ! -s "$WORK/$name.err" ] || fail "$name: stderr: $(cat "$WORK/$name.err")"
  fails=$(grep -c '^FAIL' "$WORK/$name.out" || true)
  if [ "$fails" -gt 0 ]; then
    expect_eq "$name: exit code with $fails FAIL lines" "$RC" 1
  else
    expect_eq "$name: exit code without FAIL lines" "$RC" 0
  fi
}

# 1. This host as it is.
run_doctor host
check_lines host
say "this host: exit $RC, $(wc -l <"$WORK/host.out") checks, $(grep -c '^WARN' "$WORK/host.out" || true) WARN"
if [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  grep -q '^WARN  rdma devices: none under /sys/class/infiniband' "$WORK/host.out" ||
    fail "no RDMA device here, but no WARN rdma devices line: $(cat "$WORK/host.out")"
fi
for check in "binary capabilities" "process capabilities" memlock iommu hugepages "cpu governor" \
  "pcap buffer" "disk space" o_direct; do
  grep -Eq "^(PASS|WARN|FAIL)  ${check}[ :]" "$WORK/host.out" || fail "no '$check' line"
done

# 2. --json: the same checks, parsed with jq.
run_doctor json --json
host_rc=$RC
jq -e 'type == "array"' "$WORK/json.out" >/dev/null || fail "--json: not a JSON array"
expect_eq "--json: exit code" "$host_rc" "$(grep -q '^FAIL' "$WORK/host.out" && echo 1 || echo 0)"
expect_eq "--json: statuses in order" \
  "$(jq -r '.[].status' "$WORK/json.out" | tr '\n' ' ')" \
  "$(cut -c1-4 "$WORK/host.out" | tr '\n' ' ')"
jq -e 'all(.[]; (.status == "PASS") == (.fix == null) and (.found | length > 0))' \
  "$WORK/json.out" >/dev/null || fail "--json: fix is not null exactly for PASS: $(cat "$WORK/json.out")"
names=$(jq -r '.[] | .check + (if .subject == "" then "" else " " + .subject end)' "$WORK/json.out")
expect_eq "--json: the line's check and subject" "$names" \
  "$(sed -E 's/^(PASS|WARN|FAIL)  //; s/: .*//' "$WORK/host.out")"

# 3. -i lo: the interface checks run on it (lo's MTU is 65536).
run_doctor lo -i lo -o "$WORK/new-dir"
check_lines lo
grep -q '^PASS  mtu lo: ' "$WORK/lo.out" || fail "-i lo: no PASS mtu lo: $(cat "$WORK/lo.out")"
grep -Eq '^(PASS|WARN)  rp_filter lo: ' "$WORK/lo.out" || fail "-i lo: no rp_filter lo line"
grep -Eq '^(PASS|WARN)  igmp lo: ' "$WORK/lo.out" || fail "-i lo: no igmp lo line"
grep -q 'does not exist yet' "$WORK/lo.out" || fail "-o new-dir: the missing directory is not said"
[ ! -e "$WORK/new-dir" ] || fail "doctor created -o"
leftovers=$(find "$WORK" -name '.ibvcap-doctor-*')
[ -z "$leftovers" ] || fail "the O_DIRECT probe left $leftovers"

# 4. A FAIL: --gpu 0 without an NVIDIA GPU; -o under a regular file.
if ! grep -qs 0x10de /sys/bus/pci/devices/*/vendor; then
  run_doctor gpu --gpu 0
  check_lines gpu
  expect_eq "--gpu 0 without a GPU: exit code" "$RC" 1
  grep -q '^FAIL  gpu 0: no NVIDIA GPU 0' "$WORK/gpu.out" || fail "--gpu 0: $(cat "$WORK/gpu.out")"
fi
: >"$WORK/plain-file"
run_doctor file -o "$WORK/plain-file/sub"
check_lines file
expect_eq "-o under a file: exit code" "$RC" 1
grep -q "^FAIL  disk space $WORK/plain-file/sub: .* is not a directory; " "$WORK/file.out" ||
  fail "-o under a file: $(cat "$WORK/file.out")"

# 5. Fake roots: an ACTIVE mlx5 port whose netdev has MTU 1500.
F=$WORK/fake
pci=$F/sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0
mkdir -p "$pci" "$F/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs" "$F/sys/class/net/ens1f0" \
  "$F/proc/sys/net/ipv4/conf/all" "$F/proc/sys/net/ipv4/conf/ens1f0"
echo 0 >"$pci/numa_node"
echo "4: ACTIVE" >"$F/sys/class/infiniband/mlx5_0/ports/1/state"
echo Ethernet >"$F/sys/class/infiniband/mlx5_0/ports/1/link_layer"
echo ens1f0 >"$F/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"
ln -s "$pci" "$F/sys/class/infiniband/mlx5_0/device"
ln -s "$pci" "$F/sys/class/net/ens1f0/device"
echo 1500 >"$F/sys/class/net/ens1f0/mtu"
for f in rp_filter force_igmp_version; do
  echo 0 >"$F/proc/sys/net/ipv4/conf/all/$f"
  echo 0 >"$F/proc/sys/net/ipv4/conf/ens1f0/$f"
done
run_doctor fake --sysfs-root "$F/sys" --procfs-root "$F/proc" -i mlx5_0:1
check_lines fake
expect_eq "fake root, MTU 1500: exit code" "$RC" 1
grep -q '^PASS  rdma link mlx5_0:1: ACTIVE (Ethernet, netdev ens1f0)$' "$WORK/fake.out" ||
  fail "fake root: no PASS rdma link: $(cat "$WORK/fake.out")"
grep -q '^FAIL  mtu ens1f0: 1500 bytes .*; ip link set ens1f0 mtu 9000' "$WORK/fake.out" ||
  fail "fake root: no FAIL mtu: $(cat "$WORK/fake.out")"
grep -q '^WARN  multicast loopback ens1f0: unknown' "$WORK/fake.out" ||
  fail "fake root: no WARN multicast loopback: $(cat "$WORK/fake.out")"

# 6. Usage errors: exit 2, one line.
for bad in "--cpus x" "--frame-bytes 10" "--gpu abc" "stray"; do
  # shellcheck disable=SC2086 # the words of $bad are the arguments
  run_doctor usage $bad
  expect_eq "doctor $bad: exit code" "$RC" 2
  expect_eq "doctor $bad: lines on stderr" "$(wc -l <"$WORK/usage.err")" 1
done

pass
