#!/usr/bin/env bash
# e2e verify: `ibvcap verify` on real outputs of every format, without a
# network. `ibvcap gen -w` writes a pcap; `ibvcap read` of it writes raw,
# codif, codifhdr and pcap outputs with --report (and a rotated run, -C), each
# file with its sidecar index FILE.idx.json. Then:
#   the indexes' checksums equal xxhsum -H3 of the files (an independent
#   XXH3-64), and verify passes (exit 0), with and without the report
#   draft-layout CODIF in VLAN-tagged frames verifies too
#   a run a write error stopped (ulimit -f): its files verify, their indexes
#   saying so
#   a pcapng made from the pcap by editcap (wireshark-common) is walked too
#   on copies of the outputs, one fault each, verify exits 3 and names it:
#   a truncated file (truncate -s), a deleted one (missing), a byte flipped
#   in the middle (edited: checksum), a CODIF frame number changed (checksum
#   and a sequence difference), a report edited to claim one frame more
#   no files and no report: exit 2; a report that is not JSON: exit 1
# Seconds; no namespace.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"
require_tools editcap xxhsum truncate od dd

MCAST=(239.17.0.1:36001 239.17.0.2:36001)
GEN=(--antennas 2 --threads 2 -c 300 --payload 1024)
gen_reference

# verify_rc NAME EXPECTED_RC ARGS...: ibvcap verify ARGS; output in $WORK/NAME.out.
verify_rc() {
  local label=$1 expected=$2 rc=0
  shift 2
  "$IBVCAP" verify "$@" >"$WORK/$label.out" 2>&1 || rc=$?
  expect_eq "exit code of ibvcap verify ($label): $(tr '\n' '|' <"$WORK/$label.out")" "$rc" "$expected"
}
# expect_line NAME REGEX: verify's output for NAME has a line matching REGEX.
expect_line() {
  grep -Eq "$2" "$WORK/$1.out" || fail "verify ($1) printed no line matching '$2': $(cat "$WORK/$1.out")"
}

say "ibvcap read -F raw -F codif -F codifhdr -F pcap --report"
"$IBVCAP" read -q -r "$WORK/ref.pcap" -F raw -F codif -F codifhdr -F pcap -o "$WORK/run" \
  --report "$WORK/run/report.json" >"$WORK/read.log" 2>&1 || fail "ibvcap read failed"
expect_eq "verdict" "$(j "$WORK/run/report.json" .verdict)" zero-loss
files=$(j "$WORK/run/report.json" '[.outputs[].on_disk[]] | length')
expect_eq "files in the report (pcap + 4 antennas x 3 formats)" "$files" 13
for f in "$WORK"/run/ibvcap*.{raw,codif,codifhdr,pcap}; do
  idx=$f.idx.json
  [ -f "$idx" ] || fail "no index beside $f"
  expect_eq "$f: index bytes" "$(j "$idx" .bytes)" "$(stat -c %s "$f")"
  expect_eq "$f: index checksum = xxhsum -H3" "$(j "$idx" .checksum.value)" \
    "$(xxhsum -H3 "$f" 2>/dev/null | awk '{ print $NF }')"
  expect_eq "$f: index complete" "$(j "$idx" .complete)" true
done
verify_rc all 0 --report "$WORK/run/report.json"
expect_eq "OK lines" "$(grep -c '^OK ' "$WORK/all.out")" 13
expect_line all "^verify: 13 of 13 files hold what was claimed, [1-9][0-9]* streams checked"
verify_rc noreport 0 "$WORK"/run/*.codif "$WORK"/run/ibvcap.pcap

say "a rotated run (-C): every file indexed, verify passes"
"$IBVCAP" read -q -r "$WORK/ref.pcap" -F codif -F pcap -C 1 -o "$WORK/rot" \
  --report "$WORK/rot/report.json" >"$WORK/read-rot.log" 2>&1 || fail "ibvcap read -C failed"
rotated=$(j "$WORK/rot/report.json" '[.outputs[].on_disk[]] | length')
[ "$rotated" -gt 5 ] || fail "-C 1 made only $rotated files"
verify_rc rotated 0 --report "$WORK/rot/report.json"
expect_eq "OK lines (rotated)" "$(grep -c '^OK ' "$WORK/rotated.out")" "$rotated"

say "draft-layout CODIF in 802.1Q-tagged frames: raw, codif, codifhdr walk and verify"
"$IBVCAP" gen -q -w "$WORK/draft.pcap" --codif-layout draft --vlan 100 "${GEN[@]}" "${MCAST[@]}" ||
  fail "ibvcap gen -w --codif-layout draft failed"
"$IBVCAP" read -q -r "$WORK/draft.pcap" -F raw -F codif -F codifhdr -o "$WORK/draft" \
  --report "$WORK/draft/report.json" >"$WORK/read-draft.log" 2>&1 || fail "ibvcap read of the draft capture failed"
verify_rc draft 0 --report "$WORK/draft/report.json"
expect_line draft "^verify: 12 of 12 files hold what was claimed, 24 streams checked"

say "a run a write error stopped (ulimit -f, SIGXFSZ ignored): its files verify, saying so"
rc=0
(
  trap '' XFSZ
  ulimit -f 600 # 1024-byte blocks: 614,400 bytes; each codif file (652,800) is cut in its second buffer
  exec "$IBVCAP" read -q -r "$WORK/ref.pcap" -F codif -o "$WORK/stop" --report "$WORK/stop/report.json"
) >"$WORK/read-stop.log" 2>&1 || rc=$?
expect_eq "exit code of the read a write error stopped" "$rc" 1
verify_rc stopped 0 --report "$WORK/stop/report.json"
expect_line stopped "^OK .*\.codif: [1-9][0-9]* frames, [0-9]+ bytes \(the run stopped it early: write failed: File too large"

say "pcapng (editcap -F pcapng) with an index made here"
editcap -F pcapng "$WORK/run/ibvcap.pcap" "$WORK/x.pcapng"
frames=$(j "$WORK/run/ibvcap.pcap.idx.json" .frames)
sum=$(xxhsum -H3 "$WORK/x.pcapng" 2>/dev/null | awk '{ print $NF }')
jq --arg sum "$sum" --argjson bytes "$(stat -c %s "$WORK/x.pcapng")" \
  '.file = "x.pcapng" | .format = "pcapng" | .bytes = $bytes | .checksum.value = $sum' \
  "$WORK/run/ibvcap.pcap.idx.json" >"$WORK/x.pcapng.idx.json"
verify_rc pcapng 0 "$WORK/x.pcapng"
expect_line pcapng "^OK .*x\.pcapng: $frames frames"
truncate -s -10 "$WORK/x.pcapng"
verify_rc pcapng-cut 3 "$WORK/x.pcapng"
expect_line pcapng-cut "^FAIL .*x\.pcapng: truncated: [0-9]+ bytes, index says [0-9]+"

# copy NAME: a copy of the run's outputs and report in $WORK/NAME.
copy() { cp -a "$WORK/run" "$WORK/$1"; }
codifs=("$WORK"/run/*.codif)
codif=$(basename "${codifs[0]}")

say "truncated"
copy cut
truncate -s -100 "$WORK/cut/$codif"
verify_rc cut 3 --report "$WORK/cut/report.json"
expect_line cut "^FAIL .*/cut/$codif: truncated: [0-9]+ bytes, index says [0-9]+"

say "missing"
copy gone
rm "$WORK/gone/ibvcap.pcap"
verify_rc gone 3 --report "$WORK/gone/report.json"
expect_line gone "^FAIL .*/gone/ibvcap\.pcap: missing$"
verify_rc gone-named 3 "$WORK/gone/ibvcap.pcap"
expect_line gone-named "^FAIL .*/gone/ibvcap\.pcap: missing$"

# flip FILE OFFSET: invert one byte.
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf '%b' "$(printf '\\x%02x' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
say "a byte flipped in the middle"
copy flipped
size=$(stat -c %s "$WORK/flipped/ibvcap.pcap")
flip "$WORK/flipped/ibvcap.pcap" $((size / 2))
verify_rc flipped 3 --report "$WORK/flipped/report.json"
expect_line flipped "^FAIL .*/flipped/ibvcap\.pcap: edited after the run: checksum differs"

say "a report of another run (issue 25 item 12): the same names and counts"
# The same input read again: every file, count and checksum alike; only the
# run differs, and each index names the run that wrote it.
"$IBVCAP" read -q -r "$WORK/ref.pcap" -F raw -F codif -F codifhdr -F pcap -o "$WORK/again" \
  --report "$WORK/again/report.json" >"$WORK/again.log" 2>&1 || fail "ibvcap read (again) failed"
[ "$(j "$WORK/again/report.json" .run_id)" != "$(j "$WORK/run/report.json" .run_id)" ] ||
  fail "two runs with one run_id: $(j "$WORK/run/report.json" .run_id)"
cp "$WORK/run/report.json" "$WORK/again/other.json"
verify_rc other 3 --report "$WORK/again/other.json"
expect_line other "^FAIL .*/again/$codif: written by run [0-9a-f]{16}, but the report is of run [0-9a-f]{16}: a report of another run"
verify_rc own 0 --report "$WORK/again/report.json"

say "a CODIF frame number changed"
copy renumbered
frame=$((64 + 1024))
# shellcheck disable=SC2017 # a whole frame's offset, in the middle
off=$(($(stat -c %s "$WORK/renumbered/$codif") / frame / 2 * frame))
n=$(od -An -tu4 -j "$off" -N4 "$WORK/renumbered/$codif" | tr -d ' ')
m=$(((n + 1) & 0xff))
printf '%b' "$(printf '\\x%02x' "$m")" | dd of="$WORK/renumbered/$codif" bs=1 seek="$off" conv=notrunc status=none
verify_rc renumbered 3 --report "$WORK/renumbered/report.json"
expect_line renumbered "^FAIL .*/renumbered/$codif: edited after the run: checksum differs"
expect_line renumbered "^  also: stream .* thread [0-9]+: (missing|frames|first|last) .* but report says"

say "a report that claims one frame more"
copy claims
jq '(.outputs[] | select(.format == "codif") | .on_disk[0].packets) |= . + 1' \
  "$WORK/run/report.json" >"$WORK/claims/report.json"
verify_rc claims 3 --report "$WORK/claims/report.json"
expect_line claims "^FAIL .*\.codif: frames ([0-9]+) but report says [0-9]+"
copy claims-stream
jq '.streams[0].packets += 1' "$WORK/run/report.json" >"$WORK/claims-stream/report.json"
verify_rc claims-stream 3 --report "$WORK/claims-stream/report.json"
expect_line claims-stream "stream .* thread [0-9]+: frames [0-9]+ but report says [0-9]+"

say "usage and errors"
verify_rc usage 2
echo "not json" >"$WORK/bad.json"
verify_rc badreport 1 --report "$WORK/bad.json"
expect_line badreport "bad\.json is not an ibvcap report"
pass
