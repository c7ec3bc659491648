#!/usr/bin/env bash
# e2e linktypes: real Linux cooked captures. tcpdump -i any (-y LINUX_SLL and
# -y LINUX_SLL2) in the receiving namespace records what `ibvcap gen --send`
# sends; `ibvcap read` of each file must give exit 0, verdict zero-loss, every
# packet of the sender's truth, .codif files byte-identical to gen -w + read
# of the same options, and a pcap output of the same link type that tshark
# decodes as the same UDP datagrams. Raw-IP files are covered by
# test_link_types (a namespace has no raw-IP interface to capture on).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
require_tools tcpdump

MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 2 --threads 2 -c 500 --payload 1024)

testbed_up

say "reference: ibvcap gen -w + ibvcap read -F codif with the same options"
gen_reference
read_reference 0

# Both captures on "any" in the receiving namespace, UDP only (no stray IPv6
# neighbour discovery); they record the frames as the veth delivers them.
TCPDUMPS=()
for dlt in LINUX_SLL LINUX_SLL2; do
  start "tcpdump-$dlt.log" rx tcpdump -n -U -i any -y "$dlt" -w "$WORK/$dlt.pcap" udp
  TCPDUMPS+=("$STARTED")
done
for dlt in LINUX_SLL LINUX_SLL2; do
  for ((i = 0; i < 100; i++)); do
    grep -q "listening on any" "$WORK/tcpdump-$dlt.log" && break
    sleep 0.05
  done
  grep -q "link-type $dlt" "$WORK/tcpdump-$dlt.log" ||
    fail "tcpdump -y $dlt did not start: $(cat "$WORK/tcpdump-$dlt.log")"
done
say "tcpdump -i any -y LINUX_SLL and -y LINUX_SLL2 listening in $RX_NS; sending $PACKETS packets"
send_traffic 60 --rate 5000 --truth "$WORK/truth.json"
sleep 1
for pid in "${TCPDUMPS[@]}"; do
  kill -INT "$pid"
  finish "$pid" 10
done

for dlt in LINUX_SLL LINUX_SLL2; do
  in=$WORK/$dlt.pcap
  expect_eq "frames tcpdump -y $dlt recorded" "$(capinfos -M -c -T "$in" | awk -F'\t' 'NR == 2 { print $2 }')" "$PACKETS"
  set +e
  "$IBVCAP" read -q -r "$in" -F codif -F pcap -o "$WORK/out-$dlt" --report "$WORK/$dlt.json" \
    >"$WORK/read-$dlt.log" 2>&1
  rc=$?
  set -e
  expect_eq "exit code of ibvcap read on the $dlt capture" "$rc" 0
  R=$WORK/$dlt.json
  expect_eq "$dlt verdict" "$(j "$R" .verdict)" zero-loss
  for key in packets missing duplicates out_of_order; do
    expect_eq "$dlt totals.$key" "$(j "$R" ".totals.$key")" "$(j "$WORK/truth.json" ".totals.$key")"
  done
  for key in malformed non_codif; do
    expect_eq "$dlt totals.$key" "$(j "$R" ".totals.$key")" 0
  done
  streams_match "$R" "$WORK/truth.json"
  codif_match_reference "$WORK/out-$dlt" 4
  out=$WORK/out-$dlt/ibvcap.pcap
  # The output keeps the input's link type, so tools decode it as such.
  expect_eq "$dlt: link type of the pcap output" \
    "$(capinfos -M -E -T "$out" | awk -F'\t' 'NR == 2 { print $2 }')" \
    "$(capinfos -M -E -T "$in" | awk -F'\t' 'NR == 2 { print $2 }')"
  expect_eq "$dlt: UDP datagrams tshark decodes in the pcap output" \
    "$(tshark -r "$out" -Y 'udp.dstport == 36001 && ip.dst == 239.17.0.0/16' 2>/dev/null | wc -l)" "$PACKETS"
  cmp -s <(tshark -r "$in" -T fields -e frame.time_epoch -e ip.src -e ip.dst -e udp.length 2>/dev/null) \
    <(tshark -r "$out" -T fields -e frame.time_epoch -e ip.src -e ip.dst -e udp.length 2>/dev/null) ||
    fail "$dlt: tshark reads other times or datagrams in the pcap output than in the input"
  say "$dlt: $PACKETS packets zero-loss, 4 .codif files identical, pcap output $(capinfos -M -E -T "$out" | awk -F'\t' 'NR == 2 { print $2 }')"
done

say "another link type is refused in one line naming it"
printf '\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x69\x00\x00\x00' \
  >"$WORK/wifi.pcap"
set +e
"$IBVCAP" read -q -r "$WORK/wifi.pcap" -F codif -o "$WORK/out-wifi" >"$WORK/read-wifi.log" 2>&1
rc=$?
set -e
expect_eq "exit code on an 802.11 capture" "$rc" 1
expect_eq "lines of the error" "$(wc -l <"$WORK/read-wifi.log")" 1
grep -q "link type 105 (IEEE802_11)" "$WORK/read-wifi.log" ||
  fail "the error does not name the link type: $(cat "$WORK/read-wifi.log")"
pass
