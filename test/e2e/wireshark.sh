#!/usr/bin/env bash
# e2e wireshark: the CODIF and VDIF dissectors tools/wireshark/{codif,vdif}.lua in tshark.
#   On (a) ibvcap's own pcap output (gen -> read -F pcap, both layouts, with
#   injected loss, duplicates and reordering) and (b) frames built the way DiFX's
#   codifio builds them (codif_fields write-independent, test/codifio_transcript.hpp),
#   every field of every CODIF frame that tshark shows equals ibvcap's decode of
#   the same frame (codif_fields dump): layout, all header fields, samples and
#   frames per period, absolute index and the gap from the stream's previous frame.
#   Every UDP frame is dissected as codif, none as WireGuard (wg), though without
#   codif.lua tshark shows the frames numbered 4 as WireGuard.
#   The expert info names the missing frames; a UDP port given in the
#   preference codif.ports decodes a frame without sync as codif.bad_sync.
# And the VDIF dissector tools/wireshark/vdif.lua, on pcaps of VDIF and VTP
# datagrams (vdif_fields write: frames of every EDV and legacy ones, built by
# ibvcap's encoder with swept field values, by the transcribed DiFX vdifio and
# by the transcribed baseband rules): every field of every datagram that
# tshark shows equals ibvcap's decode (vdif_fields dump), whether the ports
# come from the preference vdif.ports (vdif.vtp for VTP) or from Decode As;
# without either nothing is VDIF; with vdif.frames_per_second the index and
# gap agree too and the expert info names the missing frames.
# Needs tshark (scripts/install-deps.sh installs it) and fails, saying so,
# without it. No namespace, nothing sent; a few seconds.
# Usage: wireshark.sh IBVCAP_BINARY SOURCE_DIR CODIF_FIELDS_BINARY VDIF_FIELDS_BINARY
CODIF_FIELDS_ARG=${3:-}
VDIF_FIELDS_ARG=${4:-}
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2"

if [ -z "$CODIF_FIELDS_ARG" ] || [ -z "$VDIF_FIELDS_ARG" ]; then
  fail "usage: $0 IBVCAP_BINARY SOURCE_DIR CODIF_FIELDS_BINARY VDIF_FIELDS_BINARY"
fi
CODIF_FIELDS=$(readlink -f "$CODIF_FIELDS_ARG")
VDIF_FIELDS=$(readlink -f "$VDIF_FIELDS_ARG")
LUA=$SRC/tools/wireshark/codif.lua
VDIF_LUA=$SRC/tools/wireshark/vdif.lua
command -v tshark >/dev/null ||
  fail "tshark is not installed: run scripts/install-deps.sh (Debian package tshark)"
say "$(tshark --version 2>/dev/null | head -n 1), as uid $(id -u)"

# The columns codif_fields dump prints, in its order.
FIELDS=(frame.number codif.layout codif.frame codif.seconds codif.epoch codif.nbits
  codif.power codif.cal codif.invalid codif.complex codif.representation codif.version
  codif.protocol codif.period codif.threadid codif.groupid codif.secondaryid
  codif.stationid codif.nchan codif.blocklength codif.framelength codif.totalsamples
  codif.sync codif.metaid codif.meta1 codif.metadata0 codif.metadata1
  codif.samples_per_frame codif.frames_per_period codif.index codif.gap)

# tshark_codif FILE [TSHARK ARGS...]: tshark with codif.lua loaded.
tshark_codif() {
  local file=$1
  shift
  tshark -X "lua_script:$LUA" -r "$file" "$@" 2>>"$WORK/tshark.log"
}

# compare NAME FILE: every CODIF frame's fields, tshark against ibvcap.
compare() {
  local name=$1 file=$2 e=()
  local f
  for f in "${FIELDS[@]}"; do e+=(-e "$f"); done
  "$CODIF_FIELDS" dump "$file" >"$WORK/$name.ibvcap" || fail "$name: codif_fields dump failed"
  tshark_codif "$file" -Y codif -T fields -E separator=, -E occurrence=f "${e[@]}" \
    >"$WORK/$name.tshark" || fail "$name: tshark failed"
  local frames
  frames=$(wc -l <"$WORK/$name.ibvcap")
  [ "$frames" -gt 0 ] || fail "$name: ibvcap decodes no CODIF frame"
  diff "$WORK/$name.ibvcap" "$WORK/$name.tshark" >"$WORK/$name.diff.log" ||
    fail "$name: tshark's codif fields differ from ibvcap's decode (< ibvcap, > tshark): $(head -n 4 "$WORK/$name.diff.log")"
  # Every UDP frame is codif, and none is WireGuard.
  tshark_codif "$file" -Y udp -T fields -e frame.protocols >"$WORK/$name.protocols"
  expect_eq "$name: UDP frames" "$(wc -l <"$WORK/$name.protocols")" "$frames"
  local bad
  bad=$(grep -cv ':codif$' "$WORK/$name.protocols" || true)
  expect_eq "$name: UDP frames not ending in codif (first: $(grep -v ':codif$' "$WORK/$name.protocols" | head -n 1))" "$bad" 0
  ! grep -q ':wg' "$WORK/$name.protocols" || fail "$name: a frame dissected as WireGuard"
  # A Lua error in the dissector shows only in the tree, after the fields it added.
  tshark_codif "$file" -V >"$WORK/$name.verbose"
  ! grep -q 'Lua Error' "$WORK/$name.verbose" ||
    fail "$name: codif.lua raised an error: $(grep -m 1 'Lua Error' "$WORK/$name.verbose")"
  say "$name: $frames frames, every field equal"
}

for layout in v2 draft; do
  "$IBVCAP" gen -w "$WORK/gen_$layout.pcap" --codif-layout "$layout" -c 40 --antennas 2 --threads 2 \
    --payload 1024 --frames-per-period 16 --loss 0.1 --duplicate 0.05 --reorder 0.05 --seed 5 \
    >"$WORK/gen_$layout.log" 2>&1 || fail "ibvcap gen ($layout) failed"
  rc=0
  "$IBVCAP" read -r "$WORK/gen_$layout.pcap" -F pcap -o "$WORK/out_$layout" -q \
    >"$WORK/read_$layout.log" 2>&1 || rc=$?
  [ "$rc" = 3 ] || fail "ibvcap read ($layout): exit $rc, expected 3 (the injected loss)"
  compare "ibvcap_$layout" "$WORK/out_$layout/ibvcap.pcap"
  # The problem this fixes: without codif.lua, tshark takes frame number 4 for WireGuard.
  plain=$(tshark -r "$WORK/out_$layout/ibvcap.pcap" -T fields -e frame.protocols 2>>"$WORK/tshark.log" |
    grep -c ':wg' || true)
  [ "$plain" -gt 0 ] || fail "$layout: without codif.lua no frame shows as WireGuard: the check above proves nothing"
done

"$CODIF_FIELDS" write-independent "$WORK/independent.pcap" || fail "codif_fields write-independent failed"
compare independent "$WORK/independent.pcap"
# The sequence position: two frames missing before v2 frame 8, a repeat, a late draft frame
# (independent.verbose: compare's tshark -V).
grep -q 'missing 2 frames before this one' "$WORK/independent.verbose" ||
  fail "independent: no expert info 'missing 2 frames before this one'"
grep -q 'a repeat of the previous frame' "$WORK/independent.verbose" ||
  fail "independent: no expert info for the repeated frame"
grep -q 'late: 1 frames behind the previous one' "$WORK/independent.verbose" ||
  fail "independent: no expert info for the late frame"

# The port preference: a frame without a sync word on a listed port is CODIF
# with codif.bad_sync; on another port it is not CODIF at all.
# The first record's CODIF v2 sync: 24-byte file header, 16-byte record
# header, 42 bytes of Ethernet/IPv4/UDP, then CODIF header bytes 40-43.
at=$((24 + 16 + 42 + 40))
cp "$WORK/independent.pcap" "$WORK/nosync.pcap"
expect_eq "sync of the first independent frame" \
  "$(od -An -tx1 -j "$at" -N 4 "$WORK/nosync.pcap" | tr -d ' ')" fecaedfe
printf '\0\0\0\0' | dd of="$WORK/nosync.pcap" bs=1 seek="$at" conv=notrunc status=none
first=$(tshark_codif "$WORK/nosync.pcap" -c 1 -o codif.ports:36001 -T fields -e _ws.expert.message)
case $first in
  *"No CODIF sync word"*) ;;
  *) fail "port preference: frame 1 without sync: expert info '$first', expected codif.bad_sync" ;;
esac
first=$(tshark_codif "$WORK/nosync.pcap" -c 1 -T fields -e frame.protocols)
case $first in
  *codif*) fail "without the port preference, a frame without sync was dissected as codif: $first" ;;
esac

# ---------------------------------------------------------------- VDIF and VTP
# The columns vdif_fields dump prints, in its order.
VDIF_FIELDS_LIST=(frame.number vdif.psn vdif.invalid vdif.legacy vdif.seconds vdif.epoch
  vdif.frame vdif.version vdif.nchan vdif.framelength vdif.complex vdif.nbits vdif.thread
  vdif.station vdif.edv vdif.extended1 vdif.extended2 vdif.extended3 vdif.extended4
  vdif.edv1.sample_rate vdif.edv1.sample_rate_mhz vdif.edv1.sync vdif.edv1.das_id
  vdif.edv2.pol vdif.edv2.quadrant_minus1 vdif.edv2.correlator vdif.edv2.sync vdif.edv2.status
  vdif.edv2.psn
  vdif.edv3.sample_rate vdif.edv3.sample_rate_mhz vdif.edv3.sync vdif.edv3.loif_tuning
  vdif.edv3.personality vdif.edv3.minor_rev vdif.edv3.major_rev vdif.edv3.sideband_upper
  vdif.edv3.subband vdif.edv3.if_number vdif.edv3.dbe_unit vdif.edv3.unassigned
  vdif.edv4.unassigned vdif.edv4.mask_length vdif.edv4.sync vdif.edv4.validity_mask
  vdif.index vdif.gap)
VDIF_PORTS=46220-46221

# tshark_vdif FILE [TSHARK ARGS...]: tshark with vdif.lua loaded.
tshark_vdif() {
  local file=$1
  shift
  tshark -X "lua_script:$VDIF_LUA" -r "$file" "$@" 2>>"$WORK/tshark.log"
}

# compare_vdif NAME FILE FORMAT FPS [TSHARK ARGS...]: every VDIF datagram's
# fields, tshark (with the given port preferences or Decode As) against ibvcap.
compare_vdif() {
  local name=$1 file=$2 format=$3 fps=$4 e=() f
  shift 4
  for f in "${VDIF_FIELDS_LIST[@]}"; do e+=(-e "$f"); done
  "$VDIF_FIELDS" dump "$file" "$format" 46220 46221 "$fps" >"$WORK/$name.ibvcap" ||
    fail "$name: vdif_fields dump failed"
  tshark_vdif "$file" -o "vdif.frames_per_second:$fps" "$@" -Y vdif -T fields \
    -E separator=, -E occurrence=f "${e[@]}" >"$WORK/$name.tshark" || fail "$name: tshark failed"
  local frames
  frames=$(wc -l <"$WORK/$name.ibvcap")
  [ "$frames" -gt 50 ] || fail "$name: ibvcap decodes only $frames datagrams"
  diff "$WORK/$name.ibvcap" "$WORK/$name.tshark" >"$WORK/$name.diff.log" ||
    fail "$name: tshark's vdif fields differ from ibvcap's decode (< ibvcap, > tshark): $(head -n 4 "$WORK/$name.diff.log")"
  # Every datagram on the VDIF ports ends in vdif (or vdifvtp): none is WireGuard.
  local proto=vdif
  [ "$format" = vtp ] && proto=vdifvtp
  tshark_vdif "$file" -o "vdif.frames_per_second:$fps" "$@" -Y "udp.dstport >= 46220 && udp.dstport <= 46221" \
    -T fields -e frame.protocols >"$WORK/$name.protocols"
  expect_eq "$name: datagrams on the VDIF ports" "$(wc -l <"$WORK/$name.protocols")" "$frames"
  local bad
  bad=$(grep -cv ":$proto\$" "$WORK/$name.protocols" || true)
  expect_eq "$name: datagrams not ending in $proto (first: $(grep -v ":$proto\$" "$WORK/$name.protocols" | head -n 1))" "$bad" 0
  tshark_vdif "$file" -o "vdif.frames_per_second:$fps" "$@" -V >"$WORK/$name.verbose"
  ! grep -q 'Lua Error' "$WORK/$name.verbose" ||
    fail "$name: vdif.lua raised an error: $(grep -m 1 'Lua Error' "$WORK/$name.verbose")"
  say "$name: $frames datagrams, every field equal"
}

for format in vdif vtp; do
  "$VDIF_FIELDS" write "$WORK/$format.pcap" "$format" || fail "vdif_fields write $format failed"
  vtp_pref=FALSE
  decode_as=vdif
  if [ "$format" = vtp ]; then
    vtp_pref=TRUE
    decode_as=vdifvtp
  fi
  # The port preference, with and without frames per second.
  compare_vdif "${format}_prefs" "$WORK/$format.pcap" "$format" 0 \
    -o "vdif.ports:$VDIF_PORTS" -o "vdif.vtp:$vtp_pref"
  compare_vdif "${format}_prefs_fps" "$WORK/$format.pcap" "$format" 10 \
    -o "vdif.ports:$VDIF_PORTS" -o "vdif.vtp:$vtp_pref"
  # Decode As, preferences untouched.
  compare_vdif "${format}_decode_as" "$WORK/$format.pcap" "$format" 10 \
    -d "udp.port==46220,$decode_as" -d "udp.port==46221,$decode_as"
  # Without either, no datagram is VDIF (no heuristic: VDIF has no sync word),
  # and the one whose first bytes are 04 00 00 00 is not taken for VDIF.
  none=$(tshark_vdif "$WORK/$format.pcap" -Y "vdif || vdifvtp" -T fields -e frame.number | wc -l)
  expect_eq "$format: VDIF datagrams without port preference or Decode As" "$none" 0
  # The sequence position (verbose output of the fps run): two missing, a repeat, a late one.
  grep -q 'missing 2 frames before this one' "$WORK/${format}_prefs_fps.verbose" ||
    fail "$format: no expert info 'missing 2 frames before this one'"
  grep -q 'a repeat of the previous frame' "$WORK/${format}_prefs_fps.verbose" ||
    fail "$format: no expert info for the repeated frame"
  grep -q 'late: 1 frames behind the previous one' "$WORK/${format}_prefs_fps.verbose" ||
    fail "$format: no expert info for the late frame"
  grep -q 'Frame length disagrees with the UDP length' "$WORK/${format}_prefs.verbose" ||
    fail "$format: no expert info for the frame length that disagrees with the datagram"
  grep -q 'Shorter than the VDIF header' "$WORK/${format}_prefs.verbose" ||
    fail "$format: no expert info for the datagram too short for a header"
done
# The frame whose first bytes are 04 00 00 00: WireGuard's heuristic takes it
# without vdif.lua (so the ':vdif$' check above proves something).
plain=$(tshark -r "$WORK/vdif.pcap" -T fields -e frame.protocols 2>>"$WORK/tshark.log" |
  grep -c ':wg' || true)
[ "$plain" -gt 0 ] || fail "vdif: without vdif.lua no frame shows as WireGuard: the check above proves nothing"
# VTP: the sequence numbers tshark shows are the ones written (1000, 1001, ...).
first_psn=$(tshark_vdif "$WORK/vtp.pcap" -o "vdif.ports:$VDIF_PORTS" -o vdif.vtp:TRUE -c 1 -T fields -e vdif.psn)
expect_eq "first VTP sequence number" "$first_psn" 1000

pass
