#!/usr/bin/env bash
# e2e vlan: a capture on a VLAN netdev (verbs-mlx5-2.md N1), with the kernel's
# own 802.1Q on the testbed's veth pair: VLAN 100 on both ends. The group is
# sent once tagged (on the VLAN) and once untagged (on the parent). The
# capture on RX.100 joins there, takes the tagged copy only, and says zero-loss;
# `ibvcap devices` lists the VLAN netdev with its tag and real device (the
# kernel's /proc/net/vlan/config, read as lib/host/devices.cpp reads it).
# A kernel without 802.1Q (no 8021q module) cannot make the VLAN: the test
# then says so and exits 77, which ctest reports as "Not Run", never as passed;
# the VLAN path is then proven only on the simulated NIC (test_engine
# TwoVlansOfOnePortAreTwoCaptures) and a fake sysfs (test_host
# VlanNetdevsMapToTheirPort).
# Usage: vlan.sh IBVCAP_BINARY SOURCE_DIR
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

GROUP=239.17.0.1:36001
MCAST=("$GROUP")
GEN=(--antennas 1 --threads 1 -c 1000 --payload 1024)
DURATION=4

testbed_up
VRX=$RX_IF.100
VTX=$TX_IF.100
if ! why=$(rx ip link add link "$RX_IF" name "$VRX" type vlan id 100 2>&1); then
  printf 'NOT RUN %s: this kernel cannot make a VLAN netdev (ip link add ... type vlan: %s); captures on VLANs are tested here only on the simulated NIC and a fake sysfs\n' \
    "$TEST" "$why"
  exit 77
fi
tx ip link add link "$TX_IF" name "$VTX" type vlan id 100 || fail "cannot add $VTX"
rx ip addr add 10.100.0.1/24 dev "$VRX" || fail "cannot address $VRX"
tx ip addr add 10.100.0.11/24 dev "$VTX" || fail "cannot address $VTX"
rx ip link set "$VRX" up
tx ip link set "$VTX" up

devices=$(rx "$IBVCAP" devices) || fail "ibvcap devices failed"
grep -qF "$VRX  up" <<<"$devices" || fail "ibvcap devices does not list $VRX: $devices"
grep -qF "VLAN 100 on $RX_IF" <<<"$devices" || fail "ibvcap devices does not give $VRX's tag: $devices"
# As a user who cannot read the kernel's 0600 /proc/net/vlan/config, as the
# packaged service (verbs-mlx5-3.md R2): the tag comes from rtnetlink.
devices=$(rx setpriv --reuid=nobody --regid=nogroup --clear-groups "$IBVCAP" devices) ||
  fail "ibvcap devices as nobody failed"
grep -qF "VLAN 100 on $RX_IF" <<<"$devices" || fail "ibvcap devices as nobody does not give $VRX's tag: $devices"

start vlan.log rx "$IBVCAP" capture --source pcap -i "$VRX" --report "$WORK/vlan.json" \
  --duration "$DURATION" "$GROUP"
capture=$STARTED
JOIN_IF=$VRX wait_for_join "$capture" 10 "$GROUP"
# The same group on the parent, untagged: not the VLAN's, so not captured.
start untagged.log tx "$IBVCAP" gen --send -i "$TX_IF" --rate 10000 --seed 9 "${GEN[@]}" "$GROUP"
untagged=$STARTED
start tagged.log tx "$IBVCAP" gen --send -i "$VTX" --rate 10000 "${GEN[@]}" "$GROUP"
tagged=$STARTED
finish "$untagged" 30
expect_eq "untagged sender exit code" "$RC" 0
finish "$tagged" 30
expect_eq "tagged sender exit code" "$RC" 0
finish "$capture" $((DURATION + 20))
expect_eq "capture exit code" "$RC" 0
R=$WORK/vlan.json
expect_eq verdict "$(j "$R" .verdict)" zero-loss
expect_eq "groups[0].interface" "$(j "$R" '.groups[0].interface')" "$VRX"
expect_eq "CODIF frames (the tagged copy only)" "$(j "$R" .totals.codif)" 1000
say "$VRX joined $GROUP and captured its 1000 tagged frames; the untagged copy stayed on $RX_IF"
pass
