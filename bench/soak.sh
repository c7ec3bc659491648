#!/usr/bin/env bash
# Soak: one long live capture at a steady rate over the namespace testbed
# (scripts/testbed.sh), watching the capturing process for leaks. See
# bench/README.md, "soak.sh".
#
#   sudo bench/soak.sh                     10 minutes at 10,000 frames/s
#   sudo SOAK_SECONDS=60 bench/soak.sh     the quick mode: one minute
#   bench/soak.sh --judge SAMPLES WARMUP   only judge a sample table (for its test)
#
# `ibvcap capture --source pcap` captures, in the testbed's rx namespace, what
# `ibvcap gen --send --rate R` sends from the tx namespace: 24 streams (6
# antennas x 2 CODIF threads x 2 groups) of 8298-byte frames, R frames/s for
# SOAK_SECONDS. The capture stops by itself after exactly the frames sent
# (-c); the generator's --truth says what was sent. Every SOAK_INTERVAL
# seconds the capturing process is sampled: RSS (/proc/PID/status VmRSS), open
# files (entries of /proc/PID/fd), threads (/proc/PID/status Threads), the
# frames the rx veth received, ibvcap's own rate (its stats line), and the
# disk its outputs use.
#
# Environment (all optional):
#   SOAK_SECONDS=600       how long the sender sends
#   SOAK_RATE=10000        frames per second (8298 bytes each: 83 MB/s on the wire)
#   SOAK_INTERVAL=10       seconds between samples
#   SOAK_WARMUP=60         seconds of warm-up (default: 60, or a third of
#                          SOAK_SECONDS when that is less; longer at low rates,
#                          see "Why these limits")
#   SOAK_RSS_SLACK_MIB=8   RSS growth allowed after the warm-up
#   SOAK_FORMAT=codif      codif, pcap or none (no outputs: the ledger only)
#   SOAK_ROTATE_MB=20      -C: each output file is cut before it passes this many MB
#   SOAK_ROTATE_FILES=3    -W: files kept per output (a ring: disk use is bounded)
#   SOAK_DIR=DIR           where the outputs go (default $TMPDIR or /var/tmp)
#   SOAK_KEEP=1            keep the work directory (logs, report, truth, samples)
#   SOAK_GEN_OPTS="..."    more options for `ibvcap gen --send` (word-split), e.g.
#                          "--loss 0.001" to see the soak fail
#   IBVCAP=PATH            the binary (default build/capture/ibvcap; built when missing)
#
# Pass/fail. The soak fails (exit 1, and one last line "soak: FAIL: ...") when
#   - the capture did not exit 0, its verdict is not zero-loss, or it counted,
#     or wrote, fewer frames than the generator's truth says were sent, or its
#     report's streams differ from the truth (packets, missing, duplicates,
#     out_of_order, first, last);
#   - RSS grew after the warm-up: any sample after it more than
#     SOAK_RSS_SLACK_MIB above the sample that ends it;
#   - open files after the warm-up more than at its end (a file descriptor
#     leak only grows; a rotation closes a file before opening the next, so a
#     sample may see one fewer, never one more), or the thread count changed;
#   - the outputs used more disk than the rotation allows (below);
#   - the sender failed.
# and passes (exit 0, last line "soak: PASS: ...") otherwise. Exit 2: bad usage.
#
# Why these limits. Everything the capture allocates for its life is in place
# once frames flow: the 256 MiB kernel ring is mapped (and counted in RSS)
# at start, every stream is known after the first 24 frames, and the writer's
# pool of buffers (256 MiB) is allocated at start. The pool's pages are only
# touched as the buffers are used, in turn, so RSS rises by up to 256 MiB
# during the first cycle through the pool: 256 MiB / (rate x 8298 bytes), 3 s
# at 10,000 frames/s, 16 s at 2,000. The warm-up is a minute (a third of a
# shorter soak), and never less than one and a half such cycles plus 5 s. Ibvcap's per-frame path allocates nothing
# (docs/architecture.md), so after a minute RSS should be flat. 8 MiB of slack
# absorbs the allocator's and the kernel's noise (a few pages here and there,
# the per-second stats line and counters) and is still small against a leak:
# over the 9 minutes after warm-up at 10,000 frames/s (5.4 million frames) a
# leak of 2 bytes per frame, or of 16 KiB per second in the once-a-second
# housekeeping, exceeds it. File descriptors and threads have no reason to
# change at all once the run is under way, so they must not.
#
# Outputs. With SOAK_FORMAT=codif (the default) every (group, antenna) has
# its own output, 12 in all, rotated with -C SOAK_ROTATE_MB -W SOAK_ROTATE_FILES:
# at 10,000 frames/s each output fills a 20 MB file every 3 s, so a 10-minute
# soak also opens and closes about 2,400 files (a test of fd leaks in the
# rotation), writes about 50 GB, and never holds more than 12 x 3 x 20 MB =
# 720 MB. The disk its output directory uses is sampled with the rest and
# must stay within outputs x files x MB (+ 1 MiB per output for the
# filesystem's blocks). SOAK_FORMAT=pcap: one output; none: no disk at all.
set -euo pipefail
export LC_ALL=C # also makes $EPOCHREALTIME use a '.'
cd "$(dirname "$0")/.."

usage() {
  sed -n '6,8p' "$0" | sed 's/^# *//' >&2
  exit 2
}

# judge SAMPLES WARMUP SLACK_MIB: the verdict on the process's resources, from
# a table of samples (t_s rss_kib fds threads rx_frames pkt_s disk_kib phase,
# whitespace-separated, one per line; '#' lines and phase "stop" ignored).
# Prints one line per failure; nothing when it holds. The sample at or after
# WARMUP seconds is the reference; every later sample is held to it.
judge() {
  awk -v warm="$2" -v slack="$3" '
    /^#/ || NF < 4 || $8 == "stop" { next }
    !have && $1 + 0 >= warm + 0 {
      have = 1; t0 = $1; rss0 = $2; fd0 = $3; th0 = $4; rmax = $2; tmax = $1; n = 0
      next
    }
    have {
      n++
      if ($2 > rmax) { rmax = $2; tmax = $1 }
      if ($3 > fd0 && !fdbad) { fdbad = 1; fdmsg = sprintf("open files grew from %d (t=%ds) to %d (t=%ds)", fd0, t0, $3, $1) }
      if ($4 != th0 && !thbad) { thbad = 1; thmsg = sprintf("threads changed from %d (t=%ds) to %d (t=%ds)", th0, t0, $4, $1) }
      last = $2; tlast = $1
    }
    END {
      if (!have || n == 0) { print "too few samples after the warm-up of " warm " s to judge memory, files and threads"; exit }
      if (rmax - rss0 > slack * 1024)
        printf "RSS grew after the warm-up: %.1f MiB at t=%ds, %.1f MiB at t=%ds (%.1f at the end), more than %s MiB\n",
          rss0 / 1024, t0, rmax / 1024, tmax, last / 1024, slack
      if (fdbad) print fdmsg
      if (thbad) print thmsg
    }' "$1"
}

if [ "${1:-}" = --judge ]; then
  if [ $# -lt 3 ] || [ ! -r "$2" ]; then usage; fi
  judge "$2" "$3" "${4:-${SOAK_RSS_SLACK_MIB:-8}}"
  exit 0
fi
[ $# -eq 0 ] || usage

seconds=${SOAK_SECONDS:-600}
rate=${SOAK_RATE:-10000}
interval=${SOAK_INTERVAL:-10}
slack=${SOAK_RSS_SLACK_MIB:-8}
format=${SOAK_FORMAT:-codif}
rot_mb=${SOAK_ROTATE_MB:-20}
rot_files=${SOAK_ROTATE_FILES:-3}
for v in SECONDS:$seconds RATE:$rate INTERVAL:$interval RSS_SLACK_MIB:$slack ROTATE_MB:$rot_mb \
  ROTATE_FILES:$rot_files; do
  case ${v#*:} in '' | *[!0-9]* | 0)
    echo "soak: SOAK_${v%%:*} must be a positive whole number (got '${v#*:}')" >&2
    exit 2
    ;;
  esac
done
case $format in
  codif) outputs=12 ;; # one per (group, antenna): 2 x 6
  pcap) outputs=1 ;;
  none) outputs=0 ;;
  *) echo "soak: SOAK_FORMAT must be codif, pcap or none (got '$format')" >&2; exit 2 ;;
esac
# The default warm-up: a minute (a third of a shorter soak), and at least one
# and a half cycles through the writer's 256 MiB pool of buffers, plus 5 s
# (see "Why these limits" above).
warmup=$((seconds / 3 < 60 ? seconds / 3 : 60))
if [ "$format" != none ]; then
  pool_cycle=$((268435456 * 3 / 2 / (rate * 8298) + 5))
  [ "$warmup" -ge "$pool_cycle" ] || warmup=$pool_cycle
fi
warmup=${SOAK_WARMUP:-$warmup}
case $warmup in '' | *[!0-9]*) echo "soak: SOAK_WARMUP must be a whole number of seconds" >&2; exit 2 ;; esac
if [ $((warmup + 2 * interval)) -gt "$seconds" ]; then
  echo "soak: a warm-up of $warmup s leaves fewer than two samples of SOAK_INTERVAL ($interval s) in SOAK_SECONDS ($seconds): raise SOAK_SECONDS (or SOAK_RATE, or set SOAK_WARMUP)" >&2
  exit 2
fi
read -r -a gen_opts <<<"${SOAK_GEN_OPTS:-}"
ibvcap=${IBVCAP:-$PWD/build/capture/ibvcap}
if [ "$(id -u)" -ne 0 ]; then
  echo "soak: the testbed's network namespaces need root: sudo bench/soak.sh" >&2
  exit 1
fi
for t in ip jq awk du; do
  command -v "$t" >/dev/null || { echo "soak: '$t' is not installed: run scripts/install-deps.sh" >&2; exit 1; }
done
if [ ! -x "$ibvcap" ]; then
  echo "soak: building $ibvcap"
  BUILD_DIR=build bash scripts/build.sh -DIBVCAP_BUILD_BENCH=OFF >/dev/null
fi

groups=(239.17.0.1:36001 239.17.0.2:36001)
streams=24
per_stream=$(((seconds * rate + streams - 1) / streams))
total=$((per_stream * streams))
# Disk allowed: every output's whole ring, each file under -C MB, plus 1 MiB
# per output for the filesystem's blocks and the file being rotated.
disk_max_kib=$((outputs * (rot_files * rot_mb * 1000000 / 1024 + 1024)))

tb=soak$$
work=$(mktemp -d "${SOAK_DIR:-${TMPDIR:-/var/tmp}}/ibvcap-soak.XXXXXX")
capture_pid=
sender_pid=
tb_up=0
cleanup() {
  local pid
  for pid in $capture_pid $sender_pid; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in $capture_pid $sender_pid; do wait "$pid" 2>/dev/null || true; done
  if [ "$tb_up" = 1 ]; then
    bash scripts/testbed.sh down "$tb" >/dev/null 2>&1 || echo "soak: could not remove testbed $tb" >&2
  fi
  if [ "${SOAK_KEEP:-0}" = 1 ]; then
    echo "soak: kept $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'echo "soak: FAIL: interrupted by a signal"; exit 1' INT TERM HUP
die() {
  echo "soak: FAIL: $*"
  exit 1
}

tb_up=1
out=$(bash scripts/testbed.sh up "$tb" 2>&1) || die "cannot create the namespace testbed: $out"
eval "$(bash scripts/testbed.sh env "$tb")"

now_us() { echo "${EPOCHREALTIME/./}"; }
igmp_joined() {
  local have
  # shellcheck disable=SC2016 # awk's own fields
  have=$(ip netns exec "$RX_NS" awk -v dev="$RX_IF" '/^[0-9]/ { on = ($2 == dev || $2 == dev ":"); next } on { print $1 }' /proc/net/igmp)
  grep -qx 010011EF <<<"$have" && grep -qx 020011EF <<<"$have"
}

capture_opts=(--source pcap -i "$RX_IF" --report "$work/report.json" -c "$total")
if [ "$format" != none ]; then
  capture_opts+=(-o "$work/out" -F "$format" -C "$rot_mb" -W "$rot_files")
fi
# A backstop only: the capture stops after -c frames. A sender slowed down by
# other work on the machine takes longer; twice the time and 2 minutes more.
capture_opts+=(--duration $((2 * seconds + 120)))

echo "soak: $total frames of 8298 bytes at $rate frames/s for $seconds s (24 streams x $per_stream)," \
  "$TX_IF -> $RX_IF; outputs: $([ "$format" = none ] && echo none || echo "-F $format -C $rot_mb -W $rot_files in $work/out, at most $((disk_max_kib / 1024)) MiB")"
echo "soak: samples every $interval s; warm-up $warmup s; RSS may grow by at most $slack MiB after it; open files and threads constant"

# `ip netns exec` execs ibvcap, so $! is the capturing process itself.
ip netns exec "$RX_NS" "$ibvcap" capture "${capture_opts[@]}" "${groups[@]}" \
  >"$work/capture.out" 2>"$work/capture.err" &
capture_pid=$!
for ((i = 0; i < 200; i++)); do
  igmp_joined && break
  kill -0 "$capture_pid" 2>/dev/null || break
  sleep 0.05
done
igmp_joined || die "the capture did not start: $(tail -n 3 "$work/capture.err" | tr '\n' ' ')"
# The same file, by device and inode: the link's text is not the binary's path
# in a chroot, where a process in a new mount namespace (ip netns exec) shows
# the chroot's path in front of it.
[ "$(stat -L -c %d:%i "/proc/$capture_pid/exe" 2>/dev/null)" = "$(stat -L -c %d:%i "$ibvcap")" ] ||
  die "process $capture_pid is not ibvcap (ip netns exec did not exec it?)"

ip netns exec "$TX_NS" "$ibvcap" gen --send -q -i "$TX_IF" --rate "$rate" --truth "$work/truth.json" \
  --antennas 6 --threads 2 -c "$per_stream" "${gen_opts[@]}" "${groups[@]}" >"$work/sender.log" 2>&1 &
sender_pid=$!
t0=$(now_us)

rx_packets() { ip netns exec "$RX_NS" cat "/sys/class/net/$RX_IF/statistics/rx_packets" 2>/dev/null || echo 0; }
rx0=$(rx_packets)
# sample T: one line of the table into samples.tsv, or nothing when the
# process has gone. The last column says whether the run was steady ("run")
# or the capture may be stopping ("stop": the sender has finished, or the rx
# veth has all the frames, so the capture is about to reach -c and shut its
# writer thread and files down); "stop" rows are shown, not judged. Checked
# before /proc is read: the shutdown cannot start before the last frame is in.
sample() {
  local st rss threads fds pps disk phase=run frames
  kill -0 "$sender_pid" 2>/dev/null || phase=stop
  frames=$(($(rx_packets) - rx0))
  [ "$frames" -lt "$total" ] || phase=stop
  st=$(cat "/proc/$capture_pid/status" 2>/dev/null) || return 1
  rss=$(awk '/^VmRSS:/ { print $2 }' <<<"$st")
  threads=$(awk '/^Threads:/ { print $2 }' <<<"$st")
  fds=$(find "/proc/$capture_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  [ -n "$rss" ] && [ "$fds" -gt 0 ] || return 1
  pps=$(tail -n 1 "$work/capture.err" | sed -n 's/.*  \([0-9,]*\) pkt\/s .*/\1/p' | tr -d ,)
  disk=0
  [ ! -d "$work/out" ] || disk=$(du -sk "$work/out" | awk '{ print $1 }')
  printf '%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n' "$1" "$rss" "$fds" "$threads" "$frames" "${pps:--}" "$disk" "$phase" >>"$work/samples.tsv"
}
printf '# t_s\trss_kib\tfds\tthreads\trx_frames\tpkt_s\tdisk_kib\tphase\n' >"$work/samples.tsv"
deadline_us=$((t0 + (2 * seconds + 150) * 1000000))
sender_end=
sample 0 || true
for ((k = 1; ; k++)); do
  next=$((t0 + k * interval * 1000000))
  while [ "$(now_us)" -lt "$next" ]; do
    kill -0 "$capture_pid" 2>/dev/null || break 2
    # Everything sent and the capture still runs: it has not counted all the
    # frames. The kernel hands them over within a second; after 5 s, stop it
    # (one SIGINT: a clean stop, the report shows what it had).
    if [ -z "$sender_end" ] && ! kill -0 "$sender_pid" 2>/dev/null; then sender_end=$(now_us); fi
    if { [ -n "$sender_end" ] && [ $(($(now_us) - sender_end)) -gt 5000000 ]; } ||
      [ "$(now_us)" -gt "$deadline_us" ]; then
      kill -INT "$capture_pid" 2>/dev/null || true
      break 2
    fi
    sleep 0.2
  done
  sample $((k * interval)) || break
done
capture_rc=0
wait "$capture_pid" || capture_rc=$?
capture_pid=
elapsed_us=$(($(now_us) - t0))
sender_rc=0
for ((i = 0; i < 100; i++)); do kill -0 "$sender_pid" 2>/dev/null || break; sleep 0.1; done
kill -INT "$sender_pid" 2>/dev/null || true
wait "$sender_pid" || sender_rc=$?
sender_pid=

# --- the table -----------------------------------------------------------------
echo
printf '%6s %9s %5s %8s %11s %8s %9s\n' time_s rss_MiB fds threads frames pkt/s disk_MiB
awk -F'\t' '!/^#/ { printf "%6d %9.1f %5d %8d %11d %8s %9.1f%s\n", $1, $2 / 1024, $3, $4, $5, $6, $7 / 1024, $8 == "stop" ? " *" : "" }' "$work/samples.tsv"
echo "(frames: received by the rx veth since the sender started; pkt/s: ibvcap's own stats line, the last second;"
echo " *: all frames sent, the capture stopping: shown, not judged)"

# --- the verdict -----------------------------------------------------------------
fails=()
report=$work/report.json
truth=$work/truth.json
[ "$sender_rc" = 0 ] || fails+=("the sender exited $sender_rc: $(tail -n 2 "$work/sender.log" | tr '\n' ' ')")
sent=0
[ ! -s "$truth" ] || sent=$(jq .totals.packets "$truth")
if [ ! -s "$report" ]; then
  fails+=("the capture wrote no report (exit $capture_rc): $(tail -n 2 "$work/capture.err" | tr '\n' ' ')")
else
  verdict=$(jq -r .verdict "$report")
  codif=$(jq .totals.codif "$report")
  written=$(jq .totals.written "$report")
  [ "$capture_rc" = 0 ] || fails+=("the capture exited $capture_rc")
  [ "$verdict" = zero-loss ] || fails+=("verdict $verdict ($(jq -r '.loss_reasons | join(", ")' "$report"))")
  [ "$codif" = "$sent" ] || fails+=("the capture counted $codif CODIF frames of the $sent sent")
  if [ "$format" != none ] && [ "$written" != "$codif" ]; then
    fails+=("$written frames written of $codif counted ($(jq .totals.write_drops "$report") write drops)")
  fi
  if [ -s "$truth" ]; then
    f='[.streams[] | {group, antenna, thread, packets, missing, duplicates, out_of_order, first, last}] | sort_by(.group, .antenna, .thread)'
    diff <(jq -S "$f" "$report") <(jq -S "$f" "$truth") >"$work/streams.diff" ||
      fails+=("the report's streams differ from the generator's truth ($(grep -c '^[<>]' "$work/streams.diff") lines of diff)")
  fi
fi
while IFS= read -r line; do fails+=("$line"); done < <(judge "$work/samples.tsv" "$warmup" "$slack")
if [ "$outputs" -gt 0 ]; then
  disk_peak=$(awk -F'\t' '!/^#/ && $7 > m { m = $7 } END { print m + 0 }' "$work/samples.tsv")
  [ "$disk_peak" -le "$disk_max_kib" ] ||
    fails+=("the outputs used $((disk_peak / 1024)) MiB of disk, more than the rotation allows ($((disk_max_kib / 1024)) MiB)")
fi
if [ "$outputs" -gt 0 ] && [ -d "$work/out" ]; then
  # Each output file has its sidecar index (FILE.idx.json, docs/formats.md);
  # the -W ring removes a file's index with it.
  mapfile -t files < <(find "$work/out" -maxdepth 1 -type f ! -name '*.idx.json')
  [ "${#files[@]}" -le $((outputs * rot_files)) ] ||
    fails+=("${#files[@]} files in the output directory, more than $outputs outputs x $rot_files")
  orphans=0
  for i in "$work/out"/*.idx.json; do
    [ -e "$i" ] || continue
    [ -e "${i%.idx.json}" ] || orphans=$((orphans + 1))
  done
  [ "$orphans" = 0 ] || fails+=("$orphans index files whose output file the ring removed")
  if [ "$format" = codif ]; then
    # 64-byte CODIF header + 8192 bytes of payload: a file cut mid-frame is broken.
    cut=$(find "$work/out" -name '*.codif' -printf '%s\n' | awk '$1 % 8256 { n++ } END { print n + 0 }')
    [ "$cut" = 0 ] || fails+=("$cut output files do not hold a whole number of 8256-byte CODIF frames")
  fi
fi

sent_pps=$((sent * 1000000 / (elapsed_us > 0 ? elapsed_us : 1)))
ref=$(awk -F'\t' -v w="$warmup" '!/^#/ && $1 >= w { printf "%.1f", $2 / 1024; exit }' "$work/samples.tsv")
first=$(awk -F'\t' '!/^#/ { printf "%.1f", $2 / 1024; exit }' "$work/samples.tsv")
last=$(awk -F'\t' '!/^#/ && $8 != "stop" { r = $2; f = $3; t = $4; s = $1 } END { printf "%.1f MiB, %d fds, %d threads (t=%ds)", r / 1024, f, t, s }' "$work/samples.tsv")
# The writer's backlog at its highest (the stats lines): how close the run
# came to records not written (its pool holds 256 MiB).
backlog=$(sed -n 's/.*writer backlog \([0-9.]*\) MiB.*/\1/p' "$work/capture.err" | sort -n | tail -n 1)
disk_peak_mib=$(awk -F'\t' '!/^#/ && $7 > m { m = $7 } END { printf "%.0f", m / 1024 }' "$work/samples.tsv")
echo
echo "soak: sent $sent frames in $((elapsed_us / 1000000)) s ($sent_pps frames/s; asked $rate);" \
  "capture: exit $capture_rc, verdict ${verdict:-none}, ${codif:-0} counted, ${written:-0} written"
echo "soak: RSS ${first:-?} MiB at start, ${ref:-?} MiB after the warm-up ($warmup s), at the last steady sample $last"
echo "soak: writer backlog at most ${backlog:--} MiB; outputs on disk at most $disk_peak_mib MiB"
if [ "$sent_pps" -lt $((rate * 9 / 10)) ]; then
  echo "soak: note: the sender reached only $sent_pps frames/s of the $rate asked (the machine is busy?)"
fi
if [ ${#fails[@]} -gt 0 ]; then
  [ "${SOAK_KEEP:-0}" = 1 ] || echo "soak: SOAK_KEEP=1 keeps the logs, the report and the samples"
  msg=$(printf '%s; ' "${fails[@]}")
  echo "soak: FAIL: ${msg%; }"
  exit 1
fi
echo "soak: PASS: $sent frames in ${seconds} s at $rate frames/s, none lost; RSS, open files and threads flat after the warm-up"
