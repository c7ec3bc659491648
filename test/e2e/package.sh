#!/usr/bin/env bash
# e2e package (ctest -L package): the Debian package on this machine, end to
# end (docs/operations.md, "The package test"):
#   build it (scripts/package.sh: dpkg-buildpackage, lintian with no errors);
#   dpkg -i; getcap /usr/bin/ibvcap is cap_net_raw=ep; the man pages, the
#   completion, the Grafana dashboard and the Prometheus alerting rules
#   (/usr/share/ibvcap/{grafana,prometheus}, equal to tools/) are installed;
#   `ibvcap doctor` runs; systemd-analyze verify
#   passes on ibvcap@.service; a live capture over the namespace testbed AS
#   THE UNPRIVILEGED USER nobody, through the service's own ExecStart
#   (/usr/libexec/ibvcap/ibvcap-service), started twice: both zero-loss, each
#   in a run directory of its own, with only the binary's file capability
#   (the sender runs as root); dpkg -r leaves nothing but configuration.
# It installs into the real /usr of this machine, so it refuses to run when an
# ibvcap package (or any /usr/bin/ibvcap) is already there, and its EXIT trap
# removes the package, the user and the state it made, even on failure.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
require_tools dpkg dpkg-deb getcap setpriv systemd-analyze lintian
[ "$(id -u)" = 0 ] || fail "the package test installs a package and needs root (CI runs as root)"

if status=$(dpkg-query -W -f='${Status} ${Version}' ibvcap 2>/dev/null) &&
  [ "${status%% *}" != unknown ] && [[ $status != *not-installed* ]]; then
  fail "an ibvcap package is already on this machine ($status): this test never replaces an operator's install; remove it (dpkg --purge ibvcap) or run the test elsewhere"
fi
[ ! -e /usr/bin/ibvcap ] || fail "/usr/bin/ibvcap exists and belongs to no package: this test will not overwrite it"

# What this test made and must take away again.
INSTALLED=0
USER_MADE=0
STATE_MADE=0
getent passwd ibvcap >/dev/null || USER_MADE=1
PTP_GROUP_MADE=0
getent group ibvcap-ptp >/dev/null || PTP_GROUP_MADE=1
[ -e /var/lib/ibvcap ] || STATE_MADE=1
package_cleanup() {
  local rc=$?
  if [ "$INSTALLED" = 1 ]; then
    dpkg --purge ibvcap >/dev/null 2>&1 || echo "package: could not purge ibvcap" >&2
  fi
  if [ "$USER_MADE" = 1 ] && getent passwd ibvcap >/dev/null; then
    deluser --system --quiet ibvcap >/dev/null 2>&1 || userdel ibvcap || true
    getent group ibvcap >/dev/null && { delgroup --system --quiet ibvcap >/dev/null 2>&1 || groupdel ibvcap || true; }
  fi
  if [ "$PTP_GROUP_MADE" = 1 ] && getent group ibvcap-ptp >/dev/null; then
    delgroup --system --quiet ibvcap-ptp >/dev/null 2>&1 || groupdel ibvcap-ptp || true
  fi
  if [ "$STATE_MADE" = 1 ]; then
    rm -rf /var/lib/ibvcap
  fi
  (exit "$rc")
  cleanup
}
trap package_cleanup EXIT

say "building the package (scripts/package.sh)"
t=$(now_us)
DIST_DIR=$WORK/dist bash "$SRC/scripts/package.sh" >"$WORK/package.log" 2>&1 ||
  fail "scripts/package.sh failed: $(tail -n 20 "$WORK/package.log")"
grep -q "lintian found no errors" "$WORK/package.log" || fail "lintian did not run clean: $(tail -n 20 "$WORK/package.log")"
DEB=$(tail -n 1 "$WORK/package.log")
[ -f "$DEB" ] || fail "no package at '$DEB'"
say "built $(basename "$DEB") in $(secs_since "$t") s; lintian: no errors"

INSTALLED=1
dpkg -i "$DEB" >"$WORK/install.log" 2>&1 || fail "dpkg -i failed: $(tail -n 5 "$WORK/install.log")"
expect_eq "getcap /usr/bin/ibvcap" "$(getcap /usr/bin/ibvcap)" "/usr/bin/ibvcap cap_net_raw=ep"
getent passwd ibvcap >/dev/null || fail "postinst did not make the user ibvcap"
version=$(sed -nE '1s/^ibvcap \(([^)]+)\).*/\1/p' "$SRC/debian/changelog")
expect_eq "ibvcap --version" "$(/usr/bin/ibvcap --version | head -n 1)" "ibvcap $version"
for page in ibvcap ibvcap-capture ibvcap-read ibvcap-gen ibvcap-devices ibvcap-doctor ibvcap-verify ibvcap-merge ibvcap-report; do
  [ -f "/usr/share/man/man1/$page.1.gz" ] || fail "no man page $page(1)"
done
zgrep -q -- 'user' /usr/share/man/man1/ibvcap-capture.1.gz || fail "ibvcap-capture(1) lacks --user"
[ -f /usr/share/bash-completion/completions/ibvcap ] || fail "no bash completion installed"
ls /usr/share/ibvcap/tools/*.bt >/dev/null 2>&1 || fail "no bpftrace tools in /usr/share/ibvcap/tools"
for f in codif vdif; do
  ls /usr/lib/*/wireshark/plugins/$f.lua >/dev/null 2>&1 || fail "the Wireshark $f dissector is not installed"
done
for f in grafana/ibvcap.json prometheus/ibvcap-rules.yml; do
  cmp -s "/usr/share/ibvcap/$f" "$SRC/tools/$f" || fail "/usr/share/ibvcap/$f is missing or differs from tools/$f"
done
say "installed: cap_net_raw=ep, user ibvcap, man pages, completion, tools, dashboard and alerting rules"

rc=0
/usr/bin/ibvcap doctor -o "$WORK" >"$WORK/doctor.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "ibvcap doctor exit code $rc: $(tail -n 3 "$WORK/doctor.log")"
grep -qE '^(PASS|WARN|FAIL) ' "$WORK/doctor.log" || fail "ibvcap doctor printed no checks: $(head -n 3 "$WORK/doctor.log")"
say "ibvcap doctor: exit $rc, $(grep -cE '^(PASS|WARN|FAIL) ' "$WORK/doctor.log") checks"

unit=$(dpkg -L ibvcap | grep -E '/ibvcap@\.service$' | head -n 1)
[ -n "$unit" ] || fail "the package has no ibvcap@.service"
systemd-analyze verify --man=no "$unit" >"$WORK/verify.log" 2>&1 ||
  fail "systemd-analyze verify $unit: $(cat "$WORK/verify.log")"
say "systemd-analyze verify $unit: clean"

# The PTP clock for the service (verbs-mlx5-3.md R3): the unit's
# SupplementaryGroups= is the group the package made and its udev rule gives
# /dev/ptp* to. A clock device made unreadable the way a host without the
# rule makes it (root:root 0600; a harmless character node stands in for
# /dev/ptpN, no PHC exists here) is refused to the ibvcap user, with the
# unit's groups and capability, by a line that names the group; given the
# rule's group and mode it opens (then it is no PTP clock: a WARN, not a
# permission FAIL).
supp=$(sed -n 's/^SupplementaryGroups=//p' "$unit")
[ -n "$supp" ] || fail "$unit names no SupplementaryGroups= (the PTP clock group)"
getent group "$supp" >/dev/null || fail "the unit's group $supp does not exist after dpkg -i"
rule=$(dpkg -L ibvcap | grep -E '/rules\.d/[0-9]+-ibvcap\.rules$' | head -n 1)
[ -n "$rule" ] || fail "the package has no udev rule"
grep -qE "^SUBSYSTEM==\"ptp\", GROUP=\"$supp\", MODE=\"0640\"" "$rule" ||
  fail "$rule does not give ptp devices to $supp: $(grep -v '^#' "$rule")"
install -d -m 0755 "$WORK/dev"
mknod "$WORK/dev/ptp9" c 1 3
chmod 0600 "$WORK/dev/ptp9"
chmod 0711 "$WORK"
as_service() {
  setpriv --reuid=ibvcap --regid=ibvcap --groups="$supp" --inh-caps=+net_raw \
    --ambient-caps=+net_raw "$@"
}
out=$(as_service /usr/bin/ibvcap doctor -o "$WORK" --ptp-device "$WORK/dev/ptp9" 2>&1 || true)
grep -qF "FAIL  ptp clock $WORK/dev/ptp9: cannot open $WORK/dev/ptp9: Permission denied; add the user to the group $supp" <<<"$out" ||
  fail "a root-only clock device is not refused to ibvcap with the fix: $(grep ptp <<<"$out")"
chgrp "$supp" "$WORK/dev/ptp9"
chmod 0640 "$WORK/dev/ptp9"
out=$(as_service /usr/bin/ibvcap doctor -o "$WORK" --ptp-device "$WORK/dev/ptp9" 2>&1 || true)
grep -qF "WARN  ptp clock $WORK/dev/ptp9: opened" <<<"$out" ||
  fail "ibvcap in $supp cannot open a clock device of the rule's group and mode: $(grep ptp <<<"$out")"
say "PTP clock: the unit joins $supp, $rule gives ptp devices to it; a 0600 device refused to ibvcap with the fix, one of $supp 0640 opened"

# The live capture, as nobody, through the service's ExecStart.
testbed_up
MCAST=(239.17.0.1:36001)
GEN=(--antennas 1 --threads 2 -c 500 --payload 1024)
PACKETS=1000
STATE=$WORK/state
install -d -o nobody "$STATE"
chmod 0711 "$WORK"
for n in 1 2; do
  start "service$n.log" ip netns exec "$RX_NS" setpriv --reuid=nobody --regid=nogroup \
    --clear-groups env STATE_DIRECTORY="$STATE" /usr/libexec/ibvcap/ibvcap-service t1 \
    --source pcap -i "$RX_IF" -F codif -c "$PACKETS" --duration 30 "${MCAST[@]}"
  CAPTURE=$STARTED
  wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
  expect_eq "capture $n runs as" "$(awk '/^Uid:/ { print $2 }' /proc/"$CAPTURE"/status)" "$(id -u nobody)"
  send_traffic 30 --rate 5000
  finish "$CAPTURE" 30
  expect_eq "capture $n as nobody: exit code" "$RC" 0
  sleep 1 # the next start gets another second, or a suffix
done
mapfile -t runs < <(find "$STATE/t1" -mindepth 1 -maxdepth 1 -type d | sort)
expect_eq "run directories" "${#runs[@]}" 2
for r in "${runs[@]}"; do
  expect_eq "$r: packets" "$(j "$r/report.json" .totals.packets)" "$PACKETS"
  expect_eq "$r: verdict" "$(j "$r/report.json" .verdict)" zero-loss
  expect_eq "$r: privileges.user" "$(j "$r/report.json" .privileges.user)" nobody
  expect_eq "$r: privileges.dropped" "$(j "$r/report.json" .privileges.dropped)" true
  ls "$r"/*.codif >/dev/null 2>&1 || fail "$r has no .codif files"
done
[ -f "$STATE/metrics/t1.prom" ] || fail "no metrics file $STATE/metrics/t1.prom"
say "2 service runs as nobody: zero-loss, one run directory each, capabilities dropped"

# The VLAN path as the service user (verbs-mlx5-3.md R2): the kernel's VLAN
# table is root's (0600), the tag must come from rtnetlink. Only where the
# kernel can make a VLAN netdev; otherwise said, never passed silently.
if why=$(ip netns exec "$RX_NS" ip link add link "$RX_IF" name "$RX_IF.100" type vlan id 100 2>&1); then
  devices=$(ip netns exec "$RX_NS" setpriv --reuid=ibvcap --regid=ibvcap --groups="$supp" \
    /usr/bin/ibvcap devices) || fail "ibvcap devices as ibvcap failed"
  grep -qF "VLAN 100 on $RX_IF" <<<"$devices" || fail "ibvcap devices as ibvcap gives no VLAN tag: $devices"
  say "VLAN path as ibvcap: $RX_IF.100 listed with its tag (rtnetlink)"
else
  say "NOT RUN (part): the VLAN path as ibvcap: this kernel cannot make a VLAN netdev ($why); proven by test_vlan_links on crafted rtnetlink dumps and a 0600 table read as nobody"
fi

# Removal: nothing but configuration left.
dpkg-deb -c "$DEB" | awk '{ print substr($6, 2) }' | grep -v '/$' >"$WORK/files"
dpkg -r ibvcap >"$WORK/remove.log" 2>&1 || fail "dpkg -r failed: $(tail -n 5 "$WORK/remove.log")"
# (none: the package then is not even in state "rc", and dpkg-query finds nothing)
conffiles=$(dpkg-query -W -f='${Conffiles}' ibvcap 2>/dev/null | awk '{ print $1 }' || true)
while read -r f; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  grep -qxF -- "$f" <<<"$conffiles" || fail "dpkg -r left $f (not a configuration file)"
done <"$WORK/files"
say "dpkg -r: nothing left but configuration"
pass
