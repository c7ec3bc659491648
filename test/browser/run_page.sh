#!/usr/bin/env bash
# browser_run_page: the run page (ibvcap ... --html, ibvcap report --html) in a
# real browser: Debian's headless Chromium, driven over the DevTools protocol
# by check_page.py, with the network off (a network namespace of its own with
# only loopback up). For each page: every figure shown equals the report's,
# the presence map adds up and its tooltip says its cell, no console error,
# no request; a screenshot of each is kept in ARTIFACTS.
#
#   run_page.sh IBVCAP SRC PAGE_SYNTH ARTIFACTS
#
# 1. a lossless read (-F codif), its page written by read; then `ibvcap
#    report --verify` of its report, the page showing verify's counts;
# 2. a read with loss, duplicates and reordering (upstream gaps), each
#    presence row equal to its stream in the report;
# 3. a gap of every cause (page_synth: the real timeline, report and page
#    writer over a synthetic run of 48 streams and 1,200 windows);
# 4. a read of 2,400 streams;
# 5. ibvcap merge --html of two hosts' reads (one group each).
# Needs root (unshare --net), chromium and python3-websocket
# (scripts/install-deps.sh); fails naming what is missing. About 40 s.
set -euo pipefail

IBVCAP=$(readlink -f "$1")
SRC=$(readlink -f "$2")
SYNTH=$(readlink -f "$3")
ARTIFACTS=$4
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ibvcap-run-page.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILS=0

say() { echo "== run_page: $*"; }
fail() {
  echo "FAIL run_page: $*" >&2
  FAILS=$((FAILS + 1))
}
die() {
  echo "FAIL run_page: $*" >&2
  exit 1
}

CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || die "chromium is not installed (Debian's chromium; scripts/install-deps.sh installs it)"
# Debian's interpreter, whose packages python3-websocket installs into (a
# python3 earlier on PATH, e.g. pyenv's, does not see them).
PY=/usr/bin/python3
"$PY" -c 'import websocket' 2>/dev/null ||
  die "python3-websocket is not installed for $PY (Debian's python3-websocket; scripts/install-deps.sh installs it)"
[ "$(id -u)" = 0 ] || die "the page is loaded with the network off, in a network namespace: run as root (CI does)"
unshare --net true 2>/dev/null || die "cannot make a network namespace here (unshare --net)"
mkdir -p "$ARTIFACTS"

# check NAME PAGE REPORT [check_page.py options]: load and check one page.
check() {
  local name=$1 page=$2 report=$3
  shift 3
  local out rc=0
  out=$(unshare --net sh -c 'ip link set lo up && exec "$@"' sh \
    "$PY" "$SRC/test/browser/check_page.py" --chromium "$CHROMIUM" --page "$page" \
    --report "$report" --screenshot "$ARTIFACTS/$name.png" "$@" 2>&1) || rc=$?
  echo "$out" | sed "s/^/   $name: /"
  [ "$rc" = 0 ] || fail "$name: check_page.py exit $rc"
  [ -s "$ARTIFACTS/$name.png" ] || fail "$name: no screenshot"
}

# expect_rc WHAT GOT WANT
expect_rc() { [ "$2" = "$3" ] || fail "$1: exit code $2, expected $3"; }

MCAST=(239.17.0.1:36001 239.17.0.2:36001)

# 1. Lossless.
"$IBVCAP" gen -q -w "$WORK/clean.pcap" --antennas 3 -c 500 "${MCAST[@]}"
rc=0
"$IBVCAP" read -q -r "$WORK/clean.pcap" -F codif -o "$WORK/clean" --report "$WORK/clean.json" \
  --html "$WORK/clean.html" >"$WORK/clean.log" 2>&1 || rc=$?
expect_rc "read of a lossless capture" "$rc" 0
grep -q '<!-- The ibvcap run page' "$WORK/clean.html" || fail "read --html wrote no run page"
check lossless "$WORK/clean.html" "$WORK/clean.json" --streams-match
rc=0
"$IBVCAP" report "$WORK/clean.json" --html "$WORK/clean-verified.html" --verify >"$WORK/verify.log" 2>&1 || rc=$?
expect_rc "report --verify of a lossless run" "$rc" 0
checked=$("$IBVCAP" verify --report "$WORK/clean.json" | sed -n 's/^verify: \([0-9]*\) of \([0-9]*\) files.*/\1\/\2/p')
[ "$checked" = 6/6 ] || fail "ibvcap verify of the lossless run: '$checked', expected 6/6"
check lossless-verified "$WORK/clean-verified.html" "$WORK/clean.json" --streams-match --verify "$checked"
say "a lossless read: page from read --html and from report --verify, figures = report"

# 2. Loss, duplicates, reordering: upstream gaps.
"$IBVCAP" gen -q -w "$WORK/loss.pcap" --antennas 3 -c 2000 --loss 0.01 --duplicate 0.01 \
  --reorder 0.01 --seed 3 "${MCAST[@]}"
rc=0
"$IBVCAP" read -q -r "$WORK/loss.pcap" --report "$WORK/loss.json" --html "$WORK/loss.html" \
  >/dev/null 2>&1 || rc=$?
expect_rc "read with injected loss" "$rc" 3
[ "$(jq '.lost_by_cause.upstream' "$WORK/loss.json")" -gt 0 ] || fail "the loss run lost nothing upstream"
check loss "$WORK/loss.html" "$WORK/loss.json" --streams-match
say "a read with loss: every presence row = its stream, gaps upstream"

# 3. Every cause.
"$SYNTH" --streams 48 --windows 1200 "$WORK/causes.json" "$WORK/causes-synth.html"
for c in port_down gpu_xid completion_errors ring_hold_limit port_discards receive_queue kernel upstream writer; do
  [ "$(jq ".lost_by_cause.$c" "$WORK/causes.json")" -gt 0 ] || fail "the synthetic run has no loss of cause $c"
done
rc=0
"$IBVCAP" report "$WORK/causes.json" --html "$WORK/causes.html" >/dev/null || rc=$?
expect_rc "report --html of the synthetic run" "$rc" 0
cmp -s "$WORK/causes.html" "$WORK/causes-synth.html" || fail "report --html and the page writer differ on one report"
check causes "$WORK/causes.html" "$WORK/causes.json"
say "a gap of every cause: figures = report, cells add up"

# 4. 2,400 streams.
"$IBVCAP" gen -q -w "$WORK/wide.pcap" --antennas 100 --threads 12 --payload 64 -c 10 --loss 0.001 \
  --seed 5 "${MCAST[@]}"
rc=0
"$IBVCAP" read -q -r "$WORK/wide.pcap" --report "$WORK/wide.json" --html "$WORK/wide.html" \
  >/dev/null 2>&1 || rc=$?
expect_rc "read of 2,400 streams" "$rc" 3
[ "$(jq '.streams | length' "$WORK/wide.json")" = 2400 ] || fail "the wide run has $(jq '.streams | length' "$WORK/wide.json") streams, not 2400"
check wide "$WORK/wide.html" "$WORK/wide.json" --streams-match
say "2,400 streams: figures = report"

# 5. A merged report (ibvcap merge --html): two "hosts", one group each, of
# the loss run; its page shows each host and every stream.
for i in 1 2; do
  rc=0
  "$IBVCAP" read -q -r "$WORK/loss.pcap" --report "$WORK/host$i.json" "${MCAST[$((i - 1))]}" \
    >/dev/null 2>&1 || rc=$?
  expect_rc "read of group $i" "$rc" 3
done
rc=0
"$IBVCAP" merge -q "$WORK/host1.json" "$WORK/host2.json" --report "$WORK/obs.json" \
  --html "$WORK/obs.html" >/dev/null 2>&1 || rc=$?
expect_rc "merge --html of two hosts with loss" "$rc" 3
[ "$(jq '.hosts | length' "$WORK/obs.json")" = 2 ] || fail "the merged report has no two hosts"
[ "$(jq '.presence.streams | length' "$WORK/obs.json")" = "$(jq '.streams | length' "$WORK/loss.json")" ] ||
  fail "the merged presence has not the loss run's streams"
check merged "$WORK/obs.html" "$WORK/obs.json" --streams-match
say "a merged report of two hosts: figures = report, each host's rows"

# Refusals: one line, the cause and the fix, and nothing overwritten.
echo "not a page" >"$WORK/mine.html"
rc=0
err=$("$IBVCAP" report "$WORK/clean.json" --html "$WORK/mine.html" 2>&1) || rc=$?
expect_rc "report --html over a file that is not a run page" "$rc" 2
grep -q 'is not an ibvcap run page' <<<"$err" || fail "report --html over another file said: $err"
[ "$(cat "$WORK/mine.html")" = "not a page" ] || fail "report --html overwrote a file that was not a run page"
rc=0
err=$("$IBVCAP" report "$WORK/clean.pcap" --html "$WORK/x.html" 2>&1) || rc=$?
expect_rc "report of a file that is not JSON" "$rc" 1
grep -q 'is not JSON' <<<"$err" || fail "report of a pcap said: $err"
say "refusals: a file that is not a run page is kept; a report that is not JSON named"

if [ "$FAILS" -gt 0 ]; then
  echo "FAIL run_page: $FAILS failures (screenshots in $ARTIFACTS)"
  exit 1
fi
echo "PASS run_page (screenshots in $ARTIFACTS)"
