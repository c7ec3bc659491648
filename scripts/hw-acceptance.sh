#!/usr/bin/env bash
# hw-acceptance.sh: the acceptance run an operator does on a new mlx5 host
# before trusting ibvcap (docs/hw-acceptance.md). It lists the devices, runs the
# preflight checks, then captures `ibvcap gen --send` traffic sent from a second
# port or a second host, in every capture mode (split / --no-split, with and
# without --hw-demux, --gpu when there is a GPU), at increasing rates until the
# first step that is not lossless, and writes summary.json + summary.txt with
# the versions, each step's ledger against the generator's ground truth,
# and what the reports show of the mlx5 behaviours the engine relies on.
#
# Everything it decides is a function of files (the `ibvcap devices` text,
# sysfs, each step's report/truth/logs), so tests drive it with a stub ibvcap
# (test/scripts/hw_acceptance.sh). What only real hardware can show is said in
# docs/hw-acceptance.md.
#
# Test hooks (environment): IBVCAP_BIN (default for --ibvcap),
# IBVCAP_SYSFS_ROOT (default /sys), IBVCAP_PROC_IGMP (default /proc/net/igmp),
# IBVCAP_SSH (the ssh command, default ssh).
#
# jq programs (and dpkg-query formats) are single-quoted on purpose: their
# $names are not the shell's.
# shellcheck disable=SC2016
set -euo pipefail
export LC_ALL=C

PROG=hw-acceptance
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SYSFS=${IBVCAP_SYSFS_ROOT:-/sys}
PROC_IGMP=${IBVCAP_PROC_IGMP:-/proc/net/igmp}
SSH_CMD=${IBVCAP_SSH:-ssh}

# Exit codes (docs/hw-acceptance.md): 0 pass, 1 fail, 2 usage error, 4 refused,
# 130 interrupted; the summary's exit_code is what the run exits with.
EXIT_FAIL=1
EXIT_USAGE=2
EXIT_REFUSED=4

ALL_MODES=(split no-split split-hw-demux no-split-hw-demux groups-1 groups-64 gpu)

usage() {
  cat <<'EOF'
usage: hw-acceptance.sh --rx-if IF --tx-if IF [--ssh HOST] [options]
       hw-acceptance.sh --summarize DIR

The acceptance run for a new mlx5 host: `ibvcap devices`, the preflight checks,
then verbs captures on --rx-if of `ibvcap gen --send` traffic sent from --tx-if
(a second port of this host, or of --ssh HOST), in each capture mode, at
increasing rates until the first step with loss (or line rate). Writes
summary.json and summary.txt, with every step's report and logs, into a new
directory. See docs/hw-acceptance.md.

where:
  --rx-if IF            mlx5 netdev that captures (required)
  --tx-if IF            netdev that sends, on this host or on --ssh HOST
                        (required; on this host it must not be --rx-if)
  --ssh HOST            run the sender on HOST through ssh (BatchMode: keys, no
                        password prompt)
  --remote-ibvcap PATH  ibvcap on the --ssh host (default: ibvcap, on its PATH)
  --ibvcap PATH         ibvcap here (default: $IBVCAP_BIN, else the build next
                        to this script, else ibvcap on PATH)
  --out DIR             new or empty directory for the results (default:
                        ./ibvcap-acceptance-YYYYmmdd-HHMMSS); never overwritten

traffic:
  --groups LIST         GROUP:PORT,... (default 239.17.0.1:36001,239.17.0.2:36001)
  --antennas N          antennas 10.0.0.11, .12, ... (default 2); each must be an
                        address of --tx-if on the sending host
  --antenna IP          an antenna address (repeatable; replaces --antennas)
  --threads N           CODIF threads per antenna (default 2)
  --payload BYTES       CODIF payload per frame, multiple of 8, 8-8912 (default 8192)
  --rates LIST          increasing packet rates, comma-separated, all streams
                        together: 250000, 250k, 1.2M, 50% (of the line rate of
                        --rx-if), max (as fast as the sender can; last only).
                        Default: 10%,25%,50%,75%,90%,max, or
                        10k,50k,100k,250k,500k,max when the link speed is unknown
  --duration S          seconds of traffic per step (whole, default 10)

modes:
  --modes LIST          of split,no-split,split-hw-demux,no-split-hw-demux,
                        groups-1,groups-64,gpu (default: all six verbs modes, and
                        gpu when a GPU is found). groups-1 and groups-64 capture
                        the first group alone, and 64 groups from it (its address
                        + 0..63, same port), on the default layout (one receive
                        QP for every group's rules): the same packet rates spread
                        over 64 times the groups, side by side in one run
  --skip-hw-demux       leave out the two --hw-demux modes
  --gpu ID              run the gpu mode (--gpu=ID --gpu-verify) on GPU ID
  --no-gpu              no gpu mode, even when nvidia-smi finds a GPU

judging:
  --require PPS         pass only if every mode is lossless at PPS or more
                        (as sent, measured by the sender; k/M suffixes allowed)
  --ignore-preflight    run the steps even when a preflight check fails

capture:
  --capture-args 'ARGS' extra `ibvcap capture` options for every step, e.g.
                        '--cpu 4 --ring-depth 16384'
  --write FORMAT        also write output files (-F FORMAT, repeatable) into each
                        step's out/, deleted after the step unless --keep-output
  --keep-output         keep the output files of --write
  --join-timeout S      wait this long for the capture's IGMP joins (default 20)
  --settle S            then wait this long before sending (default 2)
  --grace S             after the sender ends, wait this long for the capture to
                        count everything, then stop it (default 5)

other:
  --summarize DIR       rebuild DIR/summary.json and summary.txt from a run's files
  -h, --help            this help

exit: 0 pass, 1 fail (a step erred, the ledger disagreed with the truth, a mode
was not lossless at its first rate or below --require, a report showed an mlx5
behaviour the engine does not expect), 2 usage error, 4 refused
(no mlx5 device, --rx-if not an mlx5 port, a preflight check failed, a tool is
missing), 130 interrupted. Every refusal and usage error is one line on stderr.
EOF
}

# ---------------------------------------------------------------- messages

# die CODE MESSAGE: one line on stderr, exit CODE.
die() {
  printf '%s: %s\n' "$PROG" "$2" >&2
  exit "$1"
}
usage_error() { die "$EXIT_USAGE" "$1 (see --help)"; }

LOG_FILE=
say() {
  printf '%s\n' "$*"
  if [ -n "$LOG_FILE" ]; then printf '%s\n' "$*" >>"$LOG_FILE"; fi
}

# ---------------------------------------------------------------- pure helpers

# is_uint S
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# valid_ipv4 S
valid_ipv4() {
  local IFS=. a b c d
  [[ $1 =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || return 1
  read -r a b c d <<<"$1"
  ((10#$a <= 255 && 10#$b <= 255 && 10#$c <= 255 && 10#$d <= 255))
}

# valid_group G:P: a multicast IPv4 (224-239) and a port 1-65535.
valid_group() {
  local ip=${1%:*} port=${1##*:}
  [[ $1 == *:* ]] && valid_ipv4 "$ip" && is_uint "$port" && ((10#$port >= 1 && 10#$port <= 65535)) &&
    ((${ip%%.*} >= 224 && ${ip%%.*} <= 239))
}

# rate_to_pps TOKEN LINE_RATE: prints the packet rate of one --rates item
# (0 for max); LINE_RATE 0 = unknown. Returns 1 when TOKEN is not a rate, 3 when
# it is a percentage and the line rate is unknown.
rate_to_pps() {
  local t=$1 line=$2
  case $t in
    max) echo 0 ;;
    *%)
      [[ ${t%\%} =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
      [ "$line" -gt 0 ] || return 3
      awk -v p="${t%\%}" -v l="$line" 'BEGIN { v = int(p * l / 100 + 0.5); if (v < 1) exit 1; print v }'
      ;;
    *k | *M)
      [[ ${t%[kM]} =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
      awk -v n="${t%[kM]}" -v m="$([ "${t: -1}" = k ] && echo 1000 || echo 1000000)" \
        'BEGIN { v = int(n * m + 0.5); if (v < 1) exit 1; print v }'
      ;;
    *)
      is_uint "$t" && [ "$((10#$t))" -gt 0 ] || return 1
      echo "$((10#$t))"
      ;;
  esac
}

# resolve_rates LIST LINE_RATE: one "LABEL PPS" line per step (PPS 0 = max), or
# one error line on stderr and status 1.
resolve_rates() {
  local list=$1 line=$2 t pps prev=0 n=0 rc IFS=,
  local -a items
  read -ra items <<<"$list"
  [ "${#items[@]}" -gt 0 ] || {
    echo "--rates is empty"
    return 1
  } >&2
  for t in "${items[@]}"; do
    n=$((n + 1))
    if [ "$prev" = max ]; then
      echo "--rates: max must be the last rate (it is followed by $t)" >&2
      return 1
    fi
    rc=0
    pps=$(rate_to_pps "$t" "$line") || rc=$?
    if [ "$rc" = 3 ]; then
      echo "--rates: $t needs the line rate, and the link speed of the capture interface is unknown; give packet rates" >&2
      return 1
    elif [ "$rc" != 0 ]; then
      echo "--rates: '$t' is not a rate (examples: 250000, 250k, 1.2M, 50%, max)" >&2
      return 1
    fi
    if [ "$pps" = 0 ]; then
      prev=max
    else
      if [ "$pps" -le "$prev" ]; then
        echo "--rates must increase: $t ($pps packets/s) comes after $prev packets/s" >&2
        return 1
      fi
      prev=$pps
    fi
    printf '%s %s\n' "$t" "$pps"
  done
}

# line_rate_pps SPEED_MBPS PAYLOAD: frames per second at line rate (wire
# frame = 14+20+8 headers + 64 CODIF header + payload + 4 FCS + 20 preamble/IFG).
line_rate_pps() {
  local speed=$1 payload=$2
  if ! is_uint "$speed" || [ "$speed" -le 0 ]; then
    echo 0
    return
  fi
  echo $((speed * 1000000 / (8 * (payload + 130))))
}

# antenna_list N: 10.0.0.11 ... 10.0.0.(10+N), as `ibvcap gen --antennas N` uses.
antenna_list() {
  local i
  for ((i = 0; i < $1; i++)); do echo "10.0.0.$((11 + i))"; done
}

# mode_capture_args MODE GPU_ID THREADS: the `ibvcap capture` options of a mode.
mode_capture_args() {
  case $1 in
    split) ;;
    no-split) echo --no-split ;;
    split-hw-demux) echo --hw-demux ;;
    no-split-hw-demux) printf '%s\n' --no-split --hw-demux ;;
    gpu) printf '%s\n' "--gpu=$2" --gpu-verify --block-threads "$3" ;;
    groups-1 | groups-64) ;;
    *) return 1 ;;
  esac
}

# mode_groups MODE GROUP...: the groups a mode captures, one per line: the
# run's, or for groups-N the first group and the N - 1 addresses after it
# (same port).
mode_groups() {
  local mode=$1 first=$2 n i ip port a b c d
  shift
  case $mode in
    groups-*) n=${mode#groups-} ;;
    *) printf '%s\n' "$@"; return 0 ;;
  esac
  ip=${first%%:*} port=${first#*:}
  IFS=. read -r a b c d <<<"$ip"
  for ((i = 0; i < n; i++)); do
    local v=$(((a << 24 | b << 16 | c << 8 | d) + i))
    echo "$((v >> 24 & 255)).$((v >> 16 & 255)).$((v >> 8 & 255)).$((v & 255)):$port"
  done
}

# ------------------------------------------------------- `ibvcap devices` text

# netdev_line DEVICES_TEXT IF: "IF up|down MTU N IPv4 a, b" of IF, from a
# device block ("    netdev IF ...") or the non-RDMA list ("  IF ...").
netdev_line() {
  awk -v ifn="$2" '{
      i = ($1 == "netdev") ? 2 : 1
      if ($i == ifn && ($(i + 1) == "up" || $(i + 1) == "down")) {
        s = ""; for (k = i; k <= NF; k++) s = s (k > i ? " " : "") $k
        print s; exit
      }
    }' <<<"$1"
}

# netdev_field LINE state|mtu|ipv4: from a netdev_line; ipv4 is a space-separated list.
netdev_field() {
  awk -v want="$2" '{
      if (want == "state") { print $2; exit }
      for (k = 1; k <= NF; k++) {
        if (want == "mtu" && $k == "MTU") { print $(k + 1); exit }
        if (want == "ipv4" && $k == "IPv4") {
          s = ""; for (j = k + 1; j <= NF; j++) { v = $j; sub(/,$/, "", v); if (v != "none") s = s (s == "" ? "" : " ") v }
          print s; exit
        }
      }
    }' <<<"$1"
}

# rdma_port_of DEVICES_TEXT IF: "DEVICE PORT STATE LINK_LAYER" of the RDMA port
# whose netdev is IF; nothing when no device drives IF.
rdma_port_of() {
  awk -v ifn="$2" '
    /^interfaces without RDMA/ { exit }
    /^[^ ]/ { dev = $1; port = ""; next }
    $1 == "port" { port = $2; state = $3; ll = $4; next }
    $1 == "netdev" && $2 == ifn && dev != "" { print dev, port, state, ll; exit }' <<<"$1"
}

# device_block DEVICES_TEXT DEVICE: the device's capability lines (two-space indent).
device_block() {
  awk -v dev="$2" '
    /^[^ ]/ { on = ($1 == dev); next }
    on && /^  [^ ]/ && $1 != "port" { sub(/^  /, ""); print }' <<<"$1"
}

# mlx5_devices SYSFS: the RDMA devices under SYSFS/class/infiniband that mlx5
# drives (driver mlx5_core, or named mlx5_*), one per line.
mlx5_devices() {
  local d name driver
  for d in "$1"/class/infiniband/*; do
    [ -e "$d" ] || continue
    name=${d##*/}
    driver=$(readlink "$d/device/driver" 2>/dev/null || true)
    if [ "${driver##*/}" = mlx5_core ] || [[ $name == mlx5_* ]]; then echo "$name"; fi
  done
}

# listed_devices DEVICES_TEXT NAMES: the NAMES (one per line) that head a
# device block of the `ibvcap devices` text.
listed_devices() {
  awk 'NR == FNR { want[$1] = 1; next } /^[^ ]/ && ($1 in want) { print $1 }' <(printf '%s\n' "$2") <(printf '%s\n' "$1")
}

# paste_list LINES: the lines joined with ", ".
paste_list() { awk 'NF { printf "%s%s", (n++ ? ", " : ""), $0 }' <<<"$1"; }

# mlx5_netdevs DEVICES_TEXT NAMES: "netdev (device)" of every port of the NAMES
# in the `ibvcap devices` text, comma-separated; "none" when there is none.
mlx5_netdevs() {
  local out
  out=$(awk 'NR == FNR { want[$1] = 1; next }
      /^interfaces without RDMA/ { exit }
      /^[^ ]/ { dev = $1; next }
      $1 == "netdev" && (dev in want) { printf "%s%s (%s)", (n++ ? ", " : ""), $2, dev }' \
    <(printf '%s\n' "$2") <(printf '%s\n' "$1"))
  echo "${out:-none}"
}

# rdma_devices SYSFS: every RDMA device name, space-separated.
rdma_devices() {
  local d out=
  for d in "$1"/class/infiniband/*; do
    [ -e "$d" ] && out="$out${out:+ }${d##*/}"
  done
  echo "$out"
}

# ------------------------------------------------------------------ versions

# first_line CMD...: the first non-empty output line of CMD, or nothing (never fails).
first_line() {
  command -v "$1" >/dev/null 2>&1 || return 0
  { timeout 10 "$@" 2>/dev/null || true; } | awk 'NF { print; exit }'
}

# read_file_line PATH: its first line, or nothing.
read_file_line() {
  [ -r "$1" ] || return 0
  awk 'NF { print; exit }' "$1" 2>/dev/null || true
}

# json_array STRINGS...: a JSON array of the arguments (jq 1.6 would read a
# leading '-' of --args as an option of its own).
json_array() {
  if [ $# -eq 0 ]; then
    echo '[]'
  else
    printf '%s\n' "$@" | jq -cRn '[inputs]'
  fi
}

# or_unknown VALUE
or_unknown() { if [ -n "$1" ]; then echo "$1"; else echo unknown; fi; }

# collect_versions RX_IF RX_DEVICE IBVCAP GPU_ID: versions.json on stdout.
# A missing tool or file gives "unknown", never a failure.
collect_versions() {
  local rx_if=$1 dev=$2 bin=$3 gpu=$4
  local kernel os rdma libibverbs ofed fw driver driver_version hca board ibvcap ibvcap_gpu commit gpu_driver gpu_name eth
  kernel=$(first_line uname -r)
  os=$(awk -F= '$1 == "PRETTY_NAME" { gsub(/"/, "", $2); print $2; exit }' /etc/os-release 2>/dev/null || true)
  rdma=$(first_line dpkg-query -W -f='${Version}\n' rdma-core)
  [ -n "$rdma" ] || rdma=$(first_line rpm -q --qf '%{VERSION}-%{RELEASE}\n' rdma-core)
  [[ $rdma != *"not installed"* ]] || rdma=
  libibverbs=$(first_line dpkg-query -W -f='${Version}\n' libibverbs1)
  [ -n "$libibverbs" ] || libibverbs=$(first_line rpm -q --qf '%{VERSION}-%{RELEASE}\n' libibverbs)
  [[ $libibverbs != *"not installed"* ]] || libibverbs=
  ofed=$(first_line ofed_info -s)
  ofed=${ofed%:}
  eth=
  if command -v ethtool >/dev/null 2>&1; then eth=$(timeout 10 ethtool -i "$rx_if" 2>/dev/null || true); fi
  fw=$(read_file_line "$SYSFS/class/infiniband/$dev/fw_ver")
  [ -n "$fw" ] || fw=$(awk -F': ' '$1 == "firmware-version" { print $2; exit }' <<<"$eth")
  if [ -z "$fw" ] && command -v ibv_devinfo >/dev/null 2>&1; then
    fw=$({ timeout 10 ibv_devinfo -d "$dev" 2>/dev/null || true; } | awk '$1 == "fw_ver:" { print $2; exit }')
  fi
  driver=$(awk -F': ' '$1 == "driver" { print $2; exit }' <<<"$eth")
  driver_version=$(awk -F': ' '$1 == "version" { print $2; exit }' <<<"$eth")
  [ -n "$driver" ] || driver=$(basename "$(readlink "$SYSFS/class/net/$rx_if/device/driver" 2>/dev/null || true)")
  [ "$driver" != . ] || driver=
  [ -n "$driver_version" ] || driver_version=$(read_file_line "$SYSFS/module/${driver:-mlx5_core}/version")
  [ -n "$driver_version" ] || driver_version=$(first_line modinfo -F version "${driver:-mlx5_core}")
  hca=$(read_file_line "$SYSFS/class/infiniband/$dev/hca_type")
  board=$(read_file_line "$SYSFS/class/infiniband/$dev/board_id")
  ibvcap=$({ timeout 10 "$bin" --version 2>/dev/null || true; } | awk 'NR == 1')
  ibvcap_gpu=$({ timeout 10 "$bin" --version 2>/dev/null || true; } | awk '/^gpu: / { sub(/^gpu: /, ""); print; exit }')
  commit=
  if command -v git >/dev/null 2>&1; then
    commit=$(git -C "$SCRIPT_DIR" describe --always --dirty 2>/dev/null || true)
  fi
  gpu_driver=
  gpu_name=
  if [ -n "$gpu" ]; then
    gpu_driver=$(first_line nvidia-smi -i "$gpu" --query-gpu=driver_version --format=csv,noheader)
    gpu_name=$(first_line nvidia-smi -i "$gpu" --query-gpu=name --format=csv,noheader)
  fi
  jq -n --arg kernel "$(or_unknown "$kernel")" --arg os "$(or_unknown "$os")" \
    --arg rdma_core "$(or_unknown "$rdma")" --arg libibverbs "$(or_unknown "$libibverbs")" \
    --arg mlnx_ofed "$(or_unknown "$ofed")" --arg firmware "$(or_unknown "$fw")" \
    --arg driver "$(or_unknown "$driver")" --arg driver_version "$(or_unknown "$driver_version")" \
    --arg hca_type "$(or_unknown "$hca")" --arg board_id "$(or_unknown "$board")" \
    --arg ibvcap "$(or_unknown "$ibvcap")" --arg ibvcap_gpu "$(or_unknown "$ibvcap_gpu")" \
    --arg script_checkout "$(or_unknown "$commit")" \
    --arg gpu_driver "$(if [ -n "$gpu" ]; then or_unknown "$gpu_driver"; else echo "no gpu mode"; fi)" \
    --arg gpu_name "$(if [ -n "$gpu" ]; then or_unknown "$gpu_name"; else echo "no gpu mode"; fi)" \
    '{kernel: $kernel, os: $os, rdma_core: $rdma_core, libibverbs: $libibverbs, mlnx_ofed: $mlnx_ofed,
      firmware: $firmware, driver: $driver, driver_version: $driver_version, hca_type: $hca_type,
      board_id: $board_id, ibvcap: $ibvcap, ibvcap_gpu: $ibvcap_gpu, script_checkout: $script_checkout,
      gpu_driver: $gpu_driver, gpu_name: $gpu_name}'
}

# ------------------------------------------------------------------ preflight

PREFLIGHT=() # one JSON object per check

# check NAME STATUS DETAIL: STATUS pass|warn|fail|info.
check() {
  PREFLIGHT+=("$(jq -cn --arg c "$1" --arg s "$2" --arg d "$3" '{check: $c, status: $s, detail: $d}')")
  say "  $(printf '%-5s %-16s %s' "$2" "$1" "$3")"
}

# check_netdev NAME IF LINE MIN_MTU [ANTENNAS...]: state, MTU and (for the
# sender) the antenna addresses of a netdev_line.
check_netdev() {
  local name=$1 ifn=$2 line=$3 min_mtu=$4 state mtu ips a missing=()
  shift 4
  if [ -z "$line" ]; then
    check "$name" fail "no interface $ifn in \`ibvcap devices\` on that host (see ip link)"
    return
  fi
  state=$(netdev_field "$line" state)
  mtu=$(netdev_field "$line" mtu)
  ips=$(netdev_field "$line" ipv4)
  if [ "$state" != up ]; then
    check "$name" fail "$ifn is down: sudo ip link set $ifn up (and check the cable: ethtool $ifn)"
  elif ! is_uint "$mtu" || [ "$mtu" -lt "$min_mtu" ]; then
    check "$name" fail "$ifn has MTU $mtu, the datagrams need $min_mtu: sudo ip link set $ifn mtu 9000"
  elif [ -z "$ips" ]; then
    check "$name" fail "$ifn has no IPv4 address (multicast needs one): sudo ip addr add ADDRESS/PREFIX dev $ifn"
  else
    for a in "$@"; do
      [[ " $ips " == *" $a "* ]] || missing+=("$a")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
      local fix=
      for a in "${missing[@]}"; do fix="$fix${fix:+; }sudo ip addr add $a/32 dev $ifn"; done
      check "$name" fail "the antenna addresses ${missing[*]} are not on $ifn (the sender sends from them): $fix"
    else
      check "$name" pass "$line"
    fi
  fi
}

# ----------------------------------------------------------- step evaluation

# ledger_file FILE: FILE is one JSON object with totals and streams (a report
# or a truth). jq -e alone passes an empty file.
ledger_file() {
  [ -s "$1" ] && jq -e 'type == "object" and has("totals") and has("streams")' "$1" >/dev/null 2>&1
}

# evaluate_step DIR: DIR/result.json from DIR/step.json (what the runner
# knew), DIR/report.json (the capture's), DIR/truth.json (the sender's), and the
# logs. A pure function of those files: --summarize runs it again.
evaluate_step() {
  local dir=$1 report=/dev/null truth=/dev/null cap_msg send_msg sent_line sent_pps sent_s
  [ -s "$dir/step.json" ] || return 1
  # A missing or broken file is an empty slurp: null below.
  if ledger_file "$dir/report.json"; then report=$dir/report.json; fi
  if ledger_file "$dir/truth.json"; then truth=$dir/truth.json; fi
  # The capture's own last word: its errors are "ibvcap capture: WHAT"
  # (capture/main.cpp, capture/run_end.cpp finish_run), after the summary, whose
  # first line "ibvcap capture: verbs from DEV:PORT(IF)" (lib/ledger/report.cpp) is not one.
  # Else what this script said of it (run_step).
  cap_msg=$({ grep -h '^ibvcap capture: ' "$dir/capture.log" 2>/dev/null || true; } |
    { grep -Ev '^ibvcap capture: (verbs|pcap) from ' || true; } | tail -n 1)
  [ -n "$cap_msg" ] || cap_msg=$({ grep -h '^hw-acceptance: ' "$dir/capture.log" 2>/dev/null || true; } | tail -n 1)
  # The sender's: the last line that is not its summary (capture/cmd_gen.cpp),
  # whatever said it (ibvcap, ssh, the remote shell, this script).
  send_msg=$({ grep -hv '^ibvcap gen: sent \|^ibvcap gen: wrote \|^[[:space:]]*$' "$dir/send.log" 2>/dev/null || true; } |
    tail -n 1)
  # "ibvcap gen: sent N packets in X s (R packets/s)..."
  sent_line=$(grep -h '^ibvcap gen: sent [0-9]* packets in ' "$dir/send.log" 2>/dev/null | tail -n 1 || true)
  sent_pps=$(sed -n 's/.* s (\([0-9]*\) packets\/s).*/\1/p' <<<"$sent_line")
  sent_s=$(sed -n 's/.* packets in \([0-9.]*\) s (.*/\1/p' <<<"$sent_line")
  jq -n --slurpfile m "$dir/step.json" --slurpfile r "$report" --slurpfile t "$truth" \
    --arg cap_msg "$cap_msg" --arg send_msg "$send_msg" \
    --arg sent_pps "$sent_pps" --arg sent_s "$sent_s" '
    def id: "\(.group) \(.antenna) thread \(.thread)";
    def key: {group, antenna, thread, packets, missing, duplicates, out_of_order, first, last};
    def pos: if . == null then "-" else "\(.seconds):\(.frame)" end;
    def brief: "packets \(.packets) missing \(.missing) dup \(.duplicates) ooo \(.out_of_order) first \(.first | pos) last \(.last | pos)";
    $m[0] as $m | $r[0] as $r | $t[0] as $t
    # The counters and notes that show how mlx5 behaved (docs/operations.md
    # section 13); names as lib/sources/verbs/engine.cpp and lib/host/nic_counters.cpp make
    # them: DEV/flow/LABEL/matched, DEV/wc/bad_wr_id, DEV/hw_counters/out_of_buffer.
    | def sum_of($re): [$r.source_counters[]? | select(.name | test($re)) | .value]
                       | if length == 0 then null else add end;
    def note_of($re): [$r.notes[]? | select(test($re))] | first;
    (if $r == null then null else {
       out_of_buffer: sum_of("/hw_counters/out_of_buffer$"),
       flow_matched: sum_of("/flow/.*/matched$"),
       flow_undelivered: sum_of("/flow/.*/undelivered$"),
       bad_wr_id: (sum_of("/wc/bad_wr_id$") // 0),
       loc_len_err: (sum_of("/wc/loc_len_err$") // 0),
       stale_completions: (sum_of("/wc/stale$") // 0),
       split_misaligned: (sum_of("/split_misaligned$") // 0),
       qp_recoveries: (sum_of("/qp_recoveries$") // 0),
       other_port_events: (sum_of("/other_port_events$") // 0),
       uncounted_rules: (sum_of("/uncounted_rules$") // 0),
       payload_mismatches: ($r.totals.payload_mismatches // 0),
       block_misses: ($r.totals.block_misses // 0),
       timestamps: note_of("^timestamps: "),
       flow_counters_note: note_of("has no flow counters|refused a counted flow rule"),
       gpu_payload_memory: note_of("^GPU [0-9]+ payload memory: ")} end) as $mlx5
    # The network edges (docs/hw-acceptance.md, "VLAN, source-specific joins,
    # time"): the VLAN note, the sources of the groups and the measured clock.
    | (if $r == null then null else {
       vlan: note_of("^vlan: "),
       sources: [$r.groups[]? | select((.sources // []) | length > 0) | "\(.group)@\(.sources | join(","))"],
       clock: ($r.clocks // [] | first)} end) as $network
    | ($t != null and $r != null) as $both
    | (if $both then
         ([$r.streams[] | {key: id, value: key}] | from_entries) as $rs
         | ([$t.streams[] | {key: id, value: key}] | from_entries) as $ts
         | ([$ts | to_entries[] | select($rs[.key] != .value)
             | "\(.key): captured \(if $rs[.key] == null then "nothing" else ($rs[.key] | brief) end), sent \(.value | brief)"]
            + [$rs | to_entries[] | select($ts[.key] == null) | "\(.key): captured \(.value | brief), never sent"])
       else [] end) as $diff
    | (if $both then ($diff | length) == 0 and $r.totals.packets == $t.totals.packets else false end) as $match
    | ($sent_pps | if . == "" then null else tonumber end) as $achieved
    | $m + {
        sender_achieved_pps: $achieved,
        sender_seconds: ($sent_s | if . == "" then null else tonumber end),
        rate_reached: (if $m.rate_pps == 0 or $achieved == null then null
                       else $achieved >= 0.9 * $m.rate_pps end),
        expected_packets: (if $t == null then null else $t.totals.packets end),
        captured_packets: (if $r == null then null else $r.totals.packets end),
        lost: (if $both then $t.totals.packets - $r.totals.packets else null end),
        missing: (if $r == null then null else $r.totals.missing end),
        nic_drops: (if $r == null then null else $r.totals.nic_drops end),
        wc_errors: (if $r == null then null else $r.totals.wc_errors end),
        write_drops: (if $r == null then null else $r.totals.write_drops end),
        streams_sent: (if $t == null then null else ($t.streams | length) end),
        streams_captured: (if $r == null then null else ($r.streams | length) end),
        verdict: (if $r == null then null else $r.verdict end),
        loss_reasons: (if $r == null then [] else ($r.loss_reasons // []) end),
        interrupted: (if $r == null then null else $r.interrupted end),
        mlx5: $mlx5,
        network: $network,
        notes: (if $r == null then [] else ($r.notes // []) end),
        ledger_matches_truth: $match,
        ledger_differences: ($diff | .[:10]),
        ledger_differences_count: ($diff | length),
        capture_message: $cap_msg,
        sender_message: $send_msg
      }
    | .status = (
        if .capture_joined == false then "error"
        elif .sender_exit != 0 or $t == null then "sender-error"
        elif $r == null then "error"
        elif .capture_exit == 0 and .verdict == "zero-loss" then (if $match then "pass" else "mismatch" end)
        elif .capture_exit == 3 and .verdict == "loss" then "loss"
        else "error" end)
    | .pass = (.status == "pass")
    | .detail = (
        if .status == "pass" then "zero-loss, \(.captured_packets) packets, every stream equals the truth"
        elif .status == "loss" then "loss: \(.loss_reasons | join("; "))"
          + (if .lost > 0 then " (\(.lost) of \(.expected_packets) packets not captured)" else "" end)
        elif .status == "mismatch" then "the capture said zero-loss but its ledger disagrees with the truth: "
          + (if .captured_packets != .expected_packets
             then "\(.captured_packets) packets captured, \(.expected_packets) sent; " else "" end)
          + "\(.ledger_differences_count) of \(.streams_sent) streams differ"
          + (if .ledger_differences_count > 0 then " (\(.ledger_differences[0]))" else "" end)
        elif .status == "sender-error" then
          "the sender failed (exit \(.sender_exit // "none"))"
          + (if .sender_message != "" then ": \(.sender_message)" elif $t == null then ": no ground truth came back" else "" end)
        elif .capture_joined == false then
          "the capture did not join its groups (exit \(.capture_exit // "none"))"
          + (if .capture_message != "" then ": \(.capture_message)" else "" end)
        elif $r == null then "no report from the capture (exit \(.capture_exit // "none"))"
          + (if .capture_message != "" then ": \(.capture_message)" else "" end)
        else "capture exit \(.capture_exit), verdict \(.verdict)"
          + (if .capture_message != "" then ": \(.capture_message)" else "" end) end)
    ' >"$dir/result.json"
}

# ------------------------------------------------------------------ summary

# build_summary DIR: DIR/summary.json and DIR/summary.txt from DIR/run.json,
# versions.json, preflight.json and steps/*/ (re-evaluated). Prints the exit code.
build_summary() {
  local dir=$1 s results=()
  [ -s "$dir/run.json" ] || die "$EXIT_USAGE" "$dir has no run.json: not a hw-acceptance directory"
  for s in "$dir"/steps/*/; do
    [ -s "$s/step.json" ] || continue
    evaluate_step "${s%/}" || die "$EXIT_FAIL" "cannot evaluate ${s%/}"
    results+=("${s%/}/result.json")
  done
  {
    if [ "${#results[@]}" -gt 0 ]; then jq -s . "${results[@]}"; else echo '[]'; fi
  } >"$dir/.steps.json"
  jq -n --slurpfile run "$dir/run.json" --slurpfile steps "$dir/.steps.json" \
    --slurpfile versions <(if [ -s "$dir/versions.json" ]; then cat "$dir/versions.json"; else echo '{}'; fi) \
    --slurpfile preflight <(if [ -s "$dir/preflight.json" ]; then cat "$dir/preflight.json"; else echo '[]'; fi) '
    $run[0] as $run | $steps[0] as $steps
    | ($steps | sort_by(.index)) as $steps
    | [ $run.modes[] as $mode
        | [$steps[] | select(.mode == $mode)] as $ms
        | ([$ms[] | select(.pass)] | last) as $lp
        | ([$ms[] | select(.pass | not)] | first) as $bad
        | {mode: $mode,
           capture_options: ($run.mode_options[$mode] // []),
           steps: ($ms | length),
           last_lossless_rate: (if $lp == null then null else $lp.rate end),
           last_lossless_pps: (if $lp == null then null else ($lp.sender_achieved_pps // $lp.rate_pps) end),
           first_failing_rate: (if $bad == null then null else $bad.rate end),
           stopped: (
             if ($ms | length) == 0 then "not run"
             elif $bad != null then "\($bad.status) at \($bad.rate)"
             elif ($ms | last | .rate_reached) == false then
               "the sender could not reach \($ms | last | .rate) (it sent \($ms | last | .sender_achieved_pps) packets/s); higher rates not tried"
             elif ($ms | last | .rate_pps) == 0 then "line rate (max) reached, all lossless"
             elif ($ms | length) < ($run.traffic.rates | length) then
               "stopped after \($ms | length) of \($run.traffic.rates | length) rates"
               + (if $run.interrupted then " (interrupted)" else "" end)
             else "all rates lossless" end)}
      ] as $modes
    # What the steps showed of the mlx5 behaviours the engine relies on
    # (docs/operations.md section 13, docs/hw-acceptance.md): fail where the
    # hardware contradicts one, warn where it needs a look, info to record.
    | def at: "\(.mode) at \(.rate)";
    def finding($severity; $text): {severity: $severity, step: at, finding: $text};
    ([$steps[] | select(.mlx5 != null) | .mlx5 as $x
      | (if $x.bad_wr_id > 0 then finding("fail"; "wc/bad_wr_id \($x.bad_wr_id): completions whose wr_id names no posted receive slot (the engine identifies QP and slot by wr_id alone)") else empty end),
        (if $x.split_misaligned > 0 then finding("warn"; "split_misaligned \($x.split_misaligned): frames whose headers did not end where the header slot (SGE0) ends: a VLAN tag on the wire (add --capture-args \u0027--vlan-tags 1\u0027), or the NIC did not fill SGE0 before SGE1 (the generator sends neither tags nor IP options)") else empty end),
        (if .status == "loss" and $x.out_of_buffer == null then finding("warn"; "loss, and the report has no out_of_buffer counter: drops in the NIC cannot be told from drops before it (see the notes: hw_counters not readable?)")
         elif .status == "loss" and $x.out_of_buffer == 0 then finding("warn"; "loss while out_of_buffer stayed 0: the frames were lost before the receive queues (switch, cable, sender: compare ethtool-before.txt and ethtool-after.txt), or the QPs count in another counter set (rdma statistic)")
         elif .status == "loss" then finding("info"; "out_of_buffer counted \($x.out_of_buffer) frames that found no receive WR, as expected at the first lossy rate")
         else empty end),
        (if $x.loc_len_err > 0 then finding("warn"; "wc/loc_len_err \($x.loc_len_err): frames longer than the receive buffers (--max-frame)") else empty end),
        (if $x.qp_recoveries > 0 then finding("warn"; "qp_recoveries \($x.qp_recoveries): a QP went to the error state and was recovered (a counted outage)") else empty end),
        (if .status == "pass" and $x.flow_matched != null and $x.flow_matched != .captured_packets then finding("warn"; "the flow rules matched \($x.flow_matched) frames and \(.captured_packets) were captured: other traffic to the groups, or rule counters that do not count as expected") else empty end),
        (if $x.other_port_events > 0 then finding("info"; "other_port_events \($x.other_port_events): events of the other port of the device (ignored)") else empty end)]
     + [$run.modes[] as $mode
        | ([$steps[] | select(.mode == $mode and .mlx5 != null)] | first) as $s
        | select($s != null) | $s
        | finding("info"; .mlx5.timestamps // "the report has no timestamps note"),
          finding("info"; if .mlx5.flow_counters_note != null then .mlx5.flow_counters_note
                          elif .mlx5.flow_matched != null then "flow counters granted (flow/.../matched in the report)"
                          else "no flow/.../matched counters, and no note saying why" end),
          (if $mode == "gpu" then finding("info"; .mlx5.gpu_payload_memory // "the report has no GPU payload memory note") else empty end)]
    ) as $findings
    # What the run checked of VLANs, source-specific joins and time, and what it
    # could not: each "checked" with what the first report showed, or "not
    # checked" with how to check it (issue 26; docs/hw-acceptance.md).
    | ([$steps[] | select(.network != null)] | first) as $ns
    | def net($what; $state; $text): {check: $what, state: $state, detail: $text};
    ([ (if $ns == null then net("vlan"; "not checked"; "no step has a report")
        elif $ns.network.vlan != null then net("vlan"; "checked"; $ns.network.vlan)
        else net("vlan"; "not checked"; "--rx-if is untagged: on a VLAN trunk give --rx-if IF.VID (the capture then joins tagged and its rules match the VLAN id)") end),
       (if $ns != null and ($ns.network.sources | length) > 0
        then net("source-specific join"; "checked"; "groups joined source by source: \($ns.network.sources | join(" "))")
        else net("source-specific join"; "not checked"; "the acceptance traffic is joined any-source: on a PIM-SSM network run ibvcap capture -i RX_IF GROUP:PORT@SOURCE by hand with the sender on SOURCE, and look for the group and source in /proc/net/mcfilter while it runs (docs/operations.md, \"Source-specific multicast\")") end),
       (if $ns == null or $ns.network.clock == null then net("clock"; "not checked"; "no report gives the device clock")
        elif $ns.network.clock.phc == null then net("clock"; "not checked"; "no PTP hardware clock on --rx-if (\($ns.network.clock.phc_missing // "none found")): frame times are \($ns.network.clock.frame_times)")
        else net("clock"; "checked"; "PHC /dev/ptp\($ns.network.clock.phc.index): offset to CLOCK_REALTIME \($ns.network.clock.phc.offset_ns) ns (spread \($ns.network.clock.phc.offset_spread_ns) ns)\(if $ns.network.clock.phc.tai then ", TAI" else "" end)\(if $ns.network.clock.phc.disciplined then ", disciplined" else ", not disciplined (no PTP daemon)" end); frame times \($ns.network.clock.frame_times), error bound \($ns.network.clock.error_bound_ns // "-") ns") end)
     ]) as $network
    | ([$steps[] | select(.status == "error" or .status == "sender-error" or .status == "mismatch")
        | "\(.mode) at \(.rate): \(.status): \(.detail)"]
       + [$modes[] | select(.steps > 0 and .last_lossless_rate == null and (.stopped | startswith("loss ")))
          | "\(.mode): not lossless even at the first rate (\(.stopped))"]
       + [$modes[] | select(.steps == 0) | "\(.mode): not run"]
       + (if $run.require_pps == null then [] else
           [$modes[] | select(.steps > 0 and .last_lossless_pps != null and .last_lossless_pps < $run.require_pps)
            | "\(.mode): lossless only up to \(.last_lossless_pps) packets/s, below --require \($run.require_pps)"]
         end)
       + [$findings[] | select(.severity == "fail") | "\(.step): mlx5: \(.finding)"]) as $failures
    | ([$preflight[0][] | select(.status == "fail")]) as $pf_fail
    | (if $run.interrupted then "interrupted"
       elif $run.refused then "refused"
       elif ($failures | length) == 0 then "pass" else "fail" end) as $result
    | {tool: "ibvcap hw-acceptance", schema: 1,
       result: $result,
       exit_code: ({pass: 0, fail: 1, refused: 4, interrupted: 130}[$result]),
       failures: (if $result == "refused"
                  then [$pf_fail[] | "preflight \(.check): \(.detail)"] else $failures end),
       started: $run.started, finished: $run.finished,
       command_line: $run.command_line,
       host: $run.host,
       versions: $versions[0],
       traffic: $run.traffic,
       preflight: $preflight[0],
       modes: $modes,
       # Issue 44: the highest lossless rate with one group and with 64 on
       # one receive QP, from the same run (null unless both modes ran).
       groups_scaling: (
         ([$modes[] | select(.mode == "groups-1")] | first) as $one
         | ([$modes[] | select(.mode == "groups-64")] | first) as $many
         | if $one == null or $many == null then null
           else {one_group_pps: $one.last_lossless_pps, groups_64_pps: $many.last_lossless_pps,
                 ratio: (if ($one.last_lossless_pps // 0) > 0 and $many.last_lossless_pps != null
                         then (($many.last_lossless_pps / $one.last_lossless_pps) * 100 | round) / 100
                         else null end)} end),
       mlx5_findings: $findings,
       network_checks: $network,
       steps: $steps}' >"$dir/summary.json"
  rm -f "$dir/.steps.json"
  render_text "$dir/summary.json" >"$dir/summary.txt"
  jq -r .exit_code "$dir/summary.json"
}

# render_text SUMMARY.JSON: the human table.
render_text() {
  jq -r '
    def pad(n): tostring | if length < n then . + (" " * (n - length)) else . end;
    def lpad(n): tostring | if length < n then (" " * (n - length)) + . else . end;
    def v: if . == null then "-" else tostring end;
    "ibvcap hardware acceptance: \(.result | ascii_upcase)",
    "  started \(.started // "-")   finished \(.finished // "-")",
    "  host \(.host.hostname)   rx \(.host.rx_if) (\(.host.rx_device) port \(.host.rx_port), \(.host.link_speed_mbps | v) Mb/s, line rate \(.traffic.line_rate_pps | v) packets/s)",
    "  tx \(.host.tx_if) on \(.host.sender)",
    "  traffic \(.traffic.groups | join(" ")), antennas \(.traffic.antennas | join(" ")), \(.traffic.threads) threads, \(.traffic.frame_bytes)-byte frames, \(.traffic.duration_s) s per step",
    "",
    "versions",
    (.versions | to_entries[] | "  \(.key | pad(16)) \(.value)"),
    "",
    "preflight",
    (.preflight[] | "  \(.status | pad(5)) \(.check | pad(16)) \(.detail)"),
    "",
    "steps",
    "  \("mode" | pad(18)) \("rate" | pad(6)) \("pps" | lpad(9)) \("sent pps" | lpad(9)) \("expected" | lpad(10)) \("captured" | lpad(10)) \("lost" | lpad(7)) \("missing" | lpad(7)) \("drops" | lpad(6)) \("verdict" | pad(9)) \("exit" | lpad(4)) \("ledger" | pad(8)) result",
    (.steps[] | "  \(.mode | pad(18)) \(.rate | pad(6)) \(if .rate_pps == 0 then "max" else .rate_pps end | lpad(9)) \(.sender_achieved_pps | v | lpad(9)) \(.expected_packets | v | lpad(10)) \(.captured_packets | v | lpad(10)) \(.lost | v | lpad(7)) \(.missing | v | lpad(7)) \(.nic_drops | v | lpad(6)) \(.verdict | v | pad(9)) \(.capture_exit | v | lpad(4)) \(if .ledger_matches_truth then "match" elif .status == "mismatch" then "DIFFERS" else "differs" end | pad(8)) \(.status | ascii_upcase)"),
    (.steps[] | select(.status != "pass") | "    \(.mode) at \(.rate): \(.detail)"),
    "",
    "modes",
    (.modes[] | "  \(.mode | pad(18)) last lossless \(if .last_lossless_rate == null then "none" else "\(.last_lossless_rate) (\(.last_lossless_pps) packets/s sent)" end); \(.stopped)"),
    (if .groups_scaling == null then empty
     else "  64 groups vs 1 group (one receive QP): last lossless \(.groups_scaling.groups_64_pps | v) vs \(.groups_scaling.one_group_pps | v) packets/s (\(.groups_scaling.ratio | v)x)" end),
    "",
    "mlx5 (docs/operations.md section 13)",
    (if (.mlx5_findings | length) == 0 then "  nothing: no step has a report"
     else (.mlx5_findings[] | "  \(.severity | pad(5)) \(.step): \(.finding)") end),
    "",
    "network (VLAN, source-specific joins, time)",
    ((.network_checks // [])[] | "  \(.state | pad(11)) \(.check | pad(20)) \(.detail)"),
    "",
    (if (.failures | length) == 0 then "result: \(.result | ascii_upcase)"
     else "result: \(.result | ascii_upcase)", (.failures[] | "  - \(.)") end)
  ' "$1"
}

# ------------------------------------------------------------------ arguments

RX_IF='' TX_IF='' SSH_HOST='' REMOTE_IBVCAP=ibvcap IBVCAP=${IBVCAP_BIN:-} OUT=
GROUPS_LIST=239.17.0.1:36001,239.17.0.2:36001 ANTENNAS_N=2 ANTENNA_IPS=() THREADS=2 PAYLOAD=8192
RATES='' DURATION=10 MODES_LIST='' SKIP_HW_DEMUX=0 GPU_ID='' NO_GPU=0 REQUIRE='' IGNORE_PREFLIGHT=0
CAPTURE_EXTRA=() WRITE_FORMATS=() KEEP_OUTPUT=0 JOIN_TIMEOUT=20 SETTLE=2 GRACE=5 SUMMARIZE=

# parse_args ARGS...: sets the globals above; usage errors exit 2.
parse_args() {
  local opt
  need() { [ $# -ge 2 ] || usage_error "$1 needs a value"; }
  while [ $# -gt 0 ]; do
    opt=$1
    case $opt in
      -h | --help)
        usage
        exit 0
        ;;
      --rx-if | --tx-if | --ssh | --remote-ibvcap | --ibvcap | --out | --groups | --antennas | --antenna | \
        --threads | --payload | --rates | --duration | --modes | --gpu | --require | --capture-args | \
        --write | --join-timeout | --settle | --grace | --summarize)
        need "$@"
        case $opt in
          --rx-if) RX_IF=$2 ;;
          --tx-if) TX_IF=$2 ;;
          --ssh) SSH_HOST=$2 ;;
          --remote-ibvcap) REMOTE_IBVCAP=$2 ;;
          --ibvcap) IBVCAP=$2 ;;
          --out) OUT=$2 ;;
          --groups) GROUPS_LIST=$2 ;;
          --antennas) ANTENNAS_N=$2 ;;
          --antenna) ANTENNA_IPS+=("$2") ;;
          --threads) THREADS=$2 ;;
          --payload) PAYLOAD=$2 ;;
          --rates) RATES=$2 ;;
          --duration) DURATION=$2 ;;
          --modes) MODES_LIST=$2 ;;
          --gpu) GPU_ID=$2 ;;
          --require) REQUIRE=$2 ;;
          --capture-args) read -ra CAPTURE_EXTRA <<<"$2" ;;
          --write) WRITE_FORMATS+=("$2") ;;
          --join-timeout) JOIN_TIMEOUT=$2 ;;
          --settle) SETTLE=$2 ;;
          --grace) GRACE=$2 ;;
          --summarize) SUMMARIZE=$2 ;;
        esac
        shift 2
        ;;
      --rx-if=* | --tx-if=* | --ssh=* | --remote-ibvcap=* | --ibvcap=* | --out=* | --groups=* | \
        --antennas=* | --antenna=* | --threads=* | --payload=* | --rates=* | --duration=* | --modes=* | \
        --gpu=* | --require=* | --capture-args=* | --write=* | --join-timeout=* | --settle=* | \
        --grace=* | --summarize=*)
        set -- "${opt%%=*}" "${opt#*=}" "${@:2}"
        ;;
      --skip-hw-demux) SKIP_HW_DEMUX=1 && shift ;;
      --no-gpu) NO_GPU=1 && shift ;;
      --ignore-preflight) IGNORE_PREFLIGHT=1 && shift ;;
      --keep-output) KEEP_OUTPUT=1 && shift ;;
      -*) usage_error "unknown option $opt" ;;
      *) usage_error "unexpected argument '$opt'" ;;
    esac
  done
  if [ -n "$SUMMARIZE" ]; then
    return 0
  fi
  [ -n "$RX_IF" ] || usage_error "--rx-if IF is required (the mlx5 netdev that captures; see ibvcap devices)"
  [ -n "$TX_IF" ] || usage_error "--tx-if IF is required (the netdev that sends: a second port here, or on --ssh HOST)"
  if [ -z "$SSH_HOST" ] && [ "$TX_IF" = "$RX_IF" ]; then
    usage_error "--tx-if and --rx-if are both $RX_IF: mlx5 does not deliver a port's own multicast to its raw-packet QPs; send from a second port, or from another host with --ssh"
  fi
  local g
  local -a groups
  IFS=, read -ra groups <<<"$GROUPS_LIST"
  [ "${#groups[@]}" -gt 0 ] || usage_error "--groups is empty"
  for g in "${groups[@]}"; do
    valid_group "$g" || usage_error "--groups: '$g' is not a multicast GROUP:PORT such as 239.17.0.1:36001"
  done
  if [ "${#ANTENNA_IPS[@]}" -eq 0 ]; then
    { is_uint "$ANTENNAS_N" && ((10#$ANTENNAS_N >= 1 && 10#$ANTENNAS_N <= 200)); } || usage_error "--antennas must be 1-200"
  fi
  for g in "${ANTENNA_IPS[@]}"; do
    valid_ipv4 "$g" || usage_error "--antenna: '$g' is not an IPv4 address"
  done
  { is_uint "$THREADS" && ((10#$THREADS >= 1 && 10#$THREADS <= 64)); } || usage_error "--threads must be 1-64"
  { is_uint "$PAYLOAD" && ((10#$PAYLOAD >= 8 && 10#$PAYLOAD <= 8912 && 10#$PAYLOAD % 8 == 0)); } ||
    usage_error "--payload must be a multiple of 8 from 8 to 8912 bytes (frames up to ibvcap capture's --max-frame 9022)"
  { is_uint "$DURATION" && ((10#$DURATION >= 1 && 10#$DURATION <= 3600)); } || usage_error "--duration must be whole seconds, 1-3600"
  { is_uint "$JOIN_TIMEOUT" && [ "$((10#$JOIN_TIMEOUT))" -ge 1 ]; } || usage_error "--join-timeout must be whole seconds, at least 1"
  is_uint "$SETTLE" || usage_error "--settle must be whole seconds"
  is_uint "$GRACE" || usage_error "--grace must be whole seconds"
  if [ -n "$GPU_ID" ]; then
    is_uint "$GPU_ID" || usage_error "--gpu takes a GPU number (nvidia-smi -L)"
    [ "$NO_GPU" = 0 ] || usage_error "--gpu and --no-gpu exclude each other"
  fi
  if [ -n "$REQUIRE" ]; then
    local r
    { r=$(rate_to_pps "$REQUIRE" 0) && [ "$r" != 0 ]; } || usage_error "--require takes a packet rate such as 1200000 or 1.2M"
    REQUIRE=$r
  fi
  if [ -n "$MODES_LIST" ]; then
    local m
    local -a ms
    IFS=, read -ra ms <<<"$MODES_LIST"
    [ "${#ms[@]}" -gt 0 ] || usage_error "--modes is empty"
    for m in "${ms[@]}"; do
      [[ " ${ALL_MODES[*]} " == *" $m "* ]] || usage_error "--modes: unknown mode '$m' (valid: ${ALL_MODES[*]})"
    done
  fi
  if [ "$NO_GPU" = 1 ] && [[ ,$MODES_LIST, == *,gpu,* ]]; then
    usage_error "--no-gpu and --modes gpu exclude each other"
  fi
  for g in "${WRITE_FORMATS[@]}"; do
    [[ $g =~ ^(raw|codif|codifhdr|pcap)$ ]] || usage_error "--write: unknown format '$g' (valid: raw, codif, codifhdr, pcap)"
  done
  if [ -n "$RATES" ]; then
    # The syntax now; percentages are resolved once the line rate is known.
    local err
    err=$(resolve_rates "$RATES" 1000000000 2>&1 >/dev/null) || usage_error "$err"
  fi
}

# find_ibvcap: the binary to use, or a usage error.
find_ibvcap() {
  local candidate
  if [ -n "$IBVCAP" ]; then
    if [[ $IBVCAP != */* ]]; then
      candidate=$(command -v "$IBVCAP" || true)
      [ -n "$candidate" ] || usage_error "--ibvcap $IBVCAP: not found on PATH"
      IBVCAP=$candidate
    fi
    { [ -f "$IBVCAP" ] && [ -x "$IBVCAP" ]; } || usage_error "--ibvcap $IBVCAP: no executable there"
    return
  fi
  candidate=$SCRIPT_DIR/../build/capture/ibvcap
  if [ -x "$candidate" ]; then
    IBVCAP=$(cd "$(dirname "$candidate")" && pwd)/ibvcap
    return
  fi
  candidate=$(command -v ibvcap || true)
  [ -n "$candidate" ] || usage_error "no ibvcap binary: build it (bash scripts/build.sh) or give --ibvcap PATH"
  IBVCAP=$candidate
}

# check_out_dir DIR: a usage error when DIR exists and is not an empty directory.
check_out_dir() {
  if [ -e "$1" ] || [ -L "$1" ]; then
    [ -d "$1" ] || usage_error "--out $1 exists and is not a directory; choose a new one"
    if [ -n "$(ls -A "$1" 2>/dev/null)" ]; then
      usage_error "--out $1 exists and is not empty; it is never overwritten: choose a new directory"
    fi
    [ -w "$1" ] || usage_error "--out $1 is not writable"
  fi
}

# ------------------------------------------------------------------ the run

CHILDREN=()
INTERRUPTED=0
# The capture and the sender run in sessions of their own (setsid, where there
# is one): a Ctrl-C at the terminal reaches only this script, which stops each
# of them with one SIGTERM. Were they in its process group, ibvcap (which
# handles SIGINT itself) would take the terminal's SIGINT and then the
# script's SIGTERM as two interrupts, and stop at once (exit 130), and a
# local ssh client would die without bringing back the truth.
DETACH=()
if command -v setsid >/dev/null 2>&1; then DETACH=(setsid); fi

# wait_pid PID LIMIT_S: waits until PID ends or LIMIT_S passes; status 1 on timeout.
wait_pid() {
  local pid=$1 i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$INTERRUPTED" = 0 ] || return 1
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && return 1
  return 0
}

# reap PID: its exit code (after it has ended).
reap() {
  local rc=0
  wait "$1" 2>/dev/null || rc=$?
  echo "$rc"
}

# stop_pid PID: SIGTERM, which ibvcap takes as Ctrl-C: a clean stop (the
# capture writes its report, the sender its truth). SIGINT is not used: a
# background job of a script starts with SIGINT ignored, and only a program
# that installs its own handler (ibvcap does) would see it. After 15 s a second
# SIGTERM (ibvcap: stop at once, files whole, exit 130), after 10 s more SIGKILL.
stop_pid() {
  kill -TERM "$1" 2>/dev/null || return 0
  local i
  for ((i = 0; i < 250; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    [ "$i" != 150 ] || kill -TERM "$1" 2>/dev/null || true
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
}

# igmp_hex A.B.C.D: as /proc/net/igmp prints the group (byte-reversed on x86).
igmp_hex() {
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  printf '%02X%02X%02X%02X' "$d" "$c" "$b" "$a"
}

# joined IF GROUP...: every group is in PROC_IGMP under IF.
joined() {
  local ifn=$1 have g
  shift
  # shellcheck disable=SC2016 # awk's own fields
  have=$(awk -v dev="$ifn" '/^[0-9]/ { on = ($2 == dev || $2 == dev ":"); next } on { print $1 }' "$PROC_IGMP" 2>/dev/null || true)
  for g in "$@"; do
    grep -qx "$(igmp_hex "${g%%:*}")" <<<"$have" || return 1
  done
}

# ethtool_counters IF: the port counters ibvcap cannot read (docs/operations.md §6).
ethtool_counters() {
  command -v ethtool >/dev/null 2>&1 || return 0
  timeout 10 ethtool -S "$1" 2>/dev/null | grep -E 'rx_discards_phy|rx_out_of_buffer|oversize|rx_buffer_passed_thres_phy|rx_prio[0-9]_discards' || true
}

# run_step INDEX MODE RATE_LABEL RATE_PPS: one capture against one send.
run_step() {
  local index=$1 mode=$2 label=$3 pps=$4
  local name dir per_stream expected bound send_bound cap_pid send_pid cap_rc=null send_rc=null joined_ok=true
  local g
  local -a mode_args cap_args gen_args ant_args=() MCAST
  local STREAMS
  mapfile -t MCAST < <(mode_groups "$mode" "${RUN_MCAST[@]}")
  STREAMS=$((${#MCAST[@]} * ${#ANTENNAS[@]} * THREADS))
  name=$(printf '%02d-%s-%s' "$index" "$mode" "$label")
  name=${name//%/pct}
  dir=$OUT/steps/$name
  mkdir -p "$dir"
  # Frame slots per stream so that the step lasts DURATION at the rate; for
  # max, at the line rate (or 1 Mpps when it is unknown).
  local nominal=$pps
  [ "$nominal" != 0 ] || nominal=$LINE_RATE
  [ "$nominal" != 0 ] || nominal=1000000
  per_stream=$(((nominal * DURATION + STREAMS - 1) / STREAMS))
  expected=$((per_stream * STREAMS))
  send_bound=$((DURATION * 5 + 30))
  bound=$((JOIN_TIMEOUT + SETTLE + send_bound + GRACE + 60))
  for g in "${ANTENNAS[@]}"; do ant_args+=(--antenna "$g"); done
  mapfile -t mode_args < <(mode_capture_args "$mode" "$GPU_ID" "$THREADS")
  cap_args=(capture -i "$RX_IF" --report "$dir/report.json" -c "$expected" --duration "$bound"
    "${ant_args[@]}" "${mode_args[@]}" "${CAPTURE_EXTRA[@]}")
  if [ "${#WRITE_FORMATS[@]}" -gt 0 ]; then
    cap_args+=(-o "$dir/out")
    for g in "${WRITE_FORMATS[@]}"; do cap_args+=(-F "$g"); done
  fi
  cap_args+=("${MCAST[@]}")
  gen_args=(gen --send -i "$TX_IF" --rate "$pps" -c "$per_stream" --duration "$send_bound"
    --threads "$THREADS" --payload "$PAYLOAD" "${ant_args[@]}")

  say "step $index: $mode at $label ($(if [ "$pps" = 0 ]; then echo "as fast as possible"; else echo "$pps packets/s"; fi)), $expected packets in $STREAMS streams"
  ethtool_counters "$RX_IF" >"$dir/ethtool-before.txt"
  printf '%q ' "$IBVCAP" "${cap_args[@]}" >"$dir/capture.cmd"
  echo >>"$dir/capture.cmd"
  # Logs in append mode: what this script adds to them (run_step's
  # "hw-acceptance: ..." lines) must not be overwritten by the child's later output.
  "${DETACH[@]}" "$IBVCAP" "${cap_args[@]}" </dev/null >>"$dir/capture.log" 2>&1 &
  cap_pid=$!
  CHILDREN+=("$cap_pid")
  local i t_limit=$((JOIN_TIMEOUT * 10))
  for ((i = 0; ; i++)); do
    if joined "$RX_IF" "${MCAST[@]}"; then break; fi
    if ! kill -0 "$cap_pid" 2>/dev/null || [ "$i" -ge "$t_limit" ] || [ "$INTERRUPTED" = 1 ]; then
      joined_ok=false
      break
    fi
    sleep 0.1
  done
  if [ "$joined_ok" = true ]; then
    sleep "$SETTLE"
    if [ -n "$SSH_HOST" ]; then
      local remote
      remote="f=\$(mktemp) || exit 1; $(printf '%q ' "$REMOTE_IBVCAP" "${gen_args[@]}" "${MCAST[@]}")--truth \"\$f\" >&2; rc=\$?; cat \"\$f\"; rm -f \"\$f\"; exit \$rc"
      printf '%s -o BatchMode=yes %s %s\n' "$SSH_CMD" "$SSH_HOST" "$remote" >"$dir/send.cmd"
      "${DETACH[@]}" "$SSH_CMD" -o BatchMode=yes "$SSH_HOST" "$remote" </dev/null >"$dir/truth.json" 2>>"$dir/send.log" &
    else
      printf '%q ' "$IBVCAP" "${gen_args[@]}" --truth "$dir/truth.json" "${MCAST[@]}" >"$dir/send.cmd"
      echo >>"$dir/send.cmd"
      "${DETACH[@]}" "$IBVCAP" "${gen_args[@]}" --truth "$dir/truth.json" "${MCAST[@]}" </dev/null >>"$dir/send.log" 2>&1 &
    fi
    send_pid=$!
    CHILDREN+=("$send_pid")
    if ! wait_pid "$send_pid" $((send_bound + 30)); then
      if [ "$INTERRUPTED" = 1 ]; then
        echo "hw-acceptance: interrupted: stopping the sender (SIGTERM)" >>"$dir/send.log"
      else
        echo "hw-acceptance: the sender was still running after $((send_bound + 30)) s; stopping it (SIGTERM)" >>"$dir/send.log"
      fi
      stop_pid "$send_pid"
    fi
    send_rc=$(reap "$send_pid")
    # The capture stops by itself at -c; what it has not counted by now is not coming.
    wait_pid "$cap_pid" "$GRACE" || {
      if [ "$INTERRUPTED" = 1 ]; then
        echo "hw-acceptance: interrupted: stopping the capture (SIGTERM)" >>"$dir/capture.log"
      else
        echo "hw-acceptance: stopping the capture (SIGTERM) $GRACE s after the sender ended" >>"$dir/capture.log"
      fi
      stop_pid "$cap_pid"
    }
  else
    if ! kill -0 "$cap_pid" 2>/dev/null; then
      echo "hw-acceptance: the capture ended before it joined ${MCAST[*]} on $RX_IF; the sender was not started" >>"$dir/capture.log"
    elif [ "$INTERRUPTED" = 1 ]; then
      echo "hw-acceptance: interrupted before the capture joined ${MCAST[*]} on $RX_IF; the sender was not started" >>"$dir/capture.log"
    else
      echo "hw-acceptance: the capture did not join ${MCAST[*]} on $RX_IF within $JOIN_TIMEOUT s (see /proc/net/igmp); the sender was not started" >>"$dir/capture.log"
    fi
    kill -0 "$cap_pid" 2>/dev/null && stop_pid "$cap_pid"
  fi
  cap_rc=$(reap "$cap_pid")
  CHILDREN=()
  ethtool_counters "$RX_IF" >"$dir/ethtool-after.txt"
  if [ "${#WRITE_FORMATS[@]}" -gt 0 ] && [ "$KEEP_OUTPUT" = 0 ]; then rm -rf "$dir/out"; fi
  jq -n --argjson index "$index" --arg mode "$mode" --arg rate "$label" --argjson rate_pps "$pps" \
    --argjson per_stream "$per_stream" --argjson planned "$expected" --argjson capture_exit "$cap_rc" \
    --argjson sender_exit "$send_rc" --argjson joined "$joined_ok" --arg dir "steps/$name" \
    --arg sender "$(if [ -n "$SSH_HOST" ]; then echo "ssh $SSH_HOST"; else echo local; fi)" \
    '{index: $index, mode: $mode, rate: $rate, rate_pps: $rate_pps, frames_per_stream: $per_stream,
      planned_packets: $planned, capture_joined: $joined, capture_exit: $capture_exit,
      sender_exit: $sender_exit, sender: $sender, dir: $dir}' >"$dir/step.json"
  evaluate_step "$dir"
  STEP_STATUS=$(jq -r .status "$dir/result.json")
  STEP_REACHED=$(jq -r .rate_reached "$dir/result.json")
  say "  $(jq -r '"\(.status | ascii_upcase): \(.detail)" + (if .sender_achieved_pps != null then " [sent \(.sender_achieved_pps) packets/s]" else "" end)' "$dir/result.json")"
}

# update_run FILTER [jq args...]: edits run.json in place.
update_run() {
  local filter=$1
  shift
  jq "$@" "$filter" "$OUT/run.json" >"$OUT/run.json.tmp" && mv "$OUT/run.json.tmp" "$OUT/run.json"
}

finish() {
  local code
  update_run '.finished = $f' --arg f "$(date -Iseconds)"
  code=$(build_summary "$OUT")
  say ""
  cat "$OUT/summary.txt"
  [ -z "$LOG_FILE" ] || cat "$OUT/summary.txt" >>"$LOG_FILE"
  say ""
  say "$PROG: results in $OUT (attach summary.txt and summary.json, or the whole directory, to a bug report)"
  exit "$code"
}

on_interrupt() {
  INTERRUPTED=1
}

# On any exit: nothing this run started is left running (a clean stop first).
cleanup_children() {
  local pid
  for pid in "${CHILDREN[@]}"; do
    kill -0 "$pid" 2>/dev/null && stop_pid "$pid"
  done
  return 0
}

main() {
  local cmdline=("$0" "$@")
  parse_args "$@"
  command -v jq >/dev/null 2>&1 || die "$EXIT_REFUSED" "jq is not installed: sudo apt-get install jq (or bash scripts/install-deps.sh)"
  if [ -n "$SUMMARIZE" ]; then
    [ -d "$SUMMARIZE" ] || usage_error "--summarize $SUMMARIZE: no such directory"
    local code
    code=$(build_summary "$SUMMARIZE")
    cat "$SUMMARIZE/summary.txt"
    exit "$code"
  fi
  find_ibvcap
  OUT=${OUT:-./ibvcap-acceptance-$(date +%Y%m%d-%H%M%S)}
  check_out_dir "$OUT"

  # The host: refuse before writing anything when it cannot run the acceptance.
  local devices devices_rc=0 mlx5 port_info rx_dev rx_port rx_state rx_ll others
  devices=$("$IBVCAP" devices --sysfs-root "$SYSFS" 2>&1) || devices_rc=$?
  if [ "$devices_rc" != 0 ]; then
    die "$EXIT_REFUSED" "\`$IBVCAP devices\` failed (exit $devices_rc): $(tail -n 1 <<<"$devices")"
  fi
  mlx5=$(mlx5_devices "$SYSFS")
  others=$(rdma_devices "$SYSFS")
  if [ -z "$others" ]; then
    die "$EXIT_REFUSED" "no mlx5 RDMA device on this host (nothing under $SYSFS/class/infiniband); this acceptance run needs one: if the NIC is mlx5, load its modules (sudo modprobe -a ib_uverbs mlx5_ib); otherwise test this host with --source pcap (bash scripts/demo.sh)"
  elif [ -z "$mlx5" ]; then
    die "$EXIT_REFUSED" "no mlx5 RDMA device on this host (RDMA devices here: $others); this acceptance run needs an mlx5 port; on this host capture with --source pcap (bash scripts/demo.sh)"
  elif [ -z "$(listed_devices "$devices" "$mlx5")" ]; then
    die "$EXIT_REFUSED" "\`ibvcap devices\` lists no mlx5 device, although $SYSFS/class/infiniband has $(paste_list "$mlx5") (see $IBVCAP devices: libibverbs does not see what sysfs shows)"
  fi
  port_info=$(rdma_port_of "$devices" "$RX_IF")
  if [ -z "$port_info" ]; then
    die "$EXIT_REFUSED" "--rx-if $RX_IF is not driven by an RDMA device (see ibvcap devices); the mlx5 netdevs here: $(mlx5_netdevs "$devices" "$mlx5")"
  fi
  read -r rx_dev rx_port rx_state rx_ll <<<"$port_info"
  if ! grep -qx "$rx_dev" <<<"$mlx5"; then
    die "$EXIT_REFUSED" "--rx-if $RX_IF belongs to $rx_dev, which is not an mlx5 device; the mlx5 netdevs here: $(mlx5_netdevs "$devices" "$mlx5")"
  fi

  # Traffic.
  IFS=, read -ra MCAST <<<"$GROUPS_LIST"
  RUN_MCAST=("${MCAST[@]}")
  if [ "${#ANTENNA_IPS[@]}" -gt 0 ]; then ANTENNAS=("${ANTENNA_IPS[@]}"); else mapfile -t ANTENNAS < <(antenna_list "$ANTENNAS_N"); fi
  STREAMS=$((${#MCAST[@]} * ${#ANTENNAS[@]} * THREADS))
  local speed
  speed=$(read_file_line "$SYSFS/class/net/$RX_IF/speed")
  is_uint "$speed" || speed=
  LINE_RATE=$(line_rate_pps "${speed:-0}" "$PAYLOAD")
  if [ -z "$RATES" ]; then
    if [ "$LINE_RATE" -gt 0 ]; then RATES=10%,25%,50%,75%,90%,max; else RATES=10k,50k,100k,250k,500k,max; fi
  fi
  local rate_lines err
  if ! rate_lines=$(resolve_rates "$RATES" "$LINE_RATE" 2>&1); then
    die "$EXIT_USAGE" "$(tail -n 1 <<<"$rate_lines") (see --help)"
  fi
  local -a RATE_LABELS=() RATE_PPS=()
  local l p
  while read -r l p; do
    if [ "$LINE_RATE" -gt 0 ] && [ "$p" -gt "$LINE_RATE" ]; then
      die "$EXIT_USAGE" "--rates: $l ($p packets/s) is above the line rate of $RX_IF ($LINE_RATE packets/s of $((PAYLOAD + 106))-byte frames at $speed Mb/s); use max for as fast as possible"
    fi
    RATE_LABELS+=("$l")
    RATE_PPS+=("$p")
  done <<<"$rate_lines"

  # GPU: explicit, or found by nvidia-smi with an ibvcap built with CUDA.
  local gpu_note='' ibvcap_gpu
  ibvcap_gpu=$({ "$IBVCAP" --version 2>/dev/null || true; } | awk '/^gpu: / { sub(/^gpu: /, ""); print; exit }')
  if [ -z "$GPU_ID" ] && [ "$NO_GPU" = 0 ] && { [ -z "$MODES_LIST" ] || [[ ,$MODES_LIST, == *,gpu,* ]]; }; then
    if ! command -v nvidia-smi >/dev/null 2>&1; then
      gpu_note="no gpu mode: nvidia-smi not found"
    elif ! timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
      gpu_note="no gpu mode: nvidia-smi lists no GPU"
    elif [[ $ibvcap_gpu == "built without CUDA"* ]]; then
      gpu_note="no gpu mode: a GPU is present but ibvcap was $ibvcap_gpu"
    else
      GPU_ID=0
      gpu_note="gpu mode on GPU 0 (found by nvidia-smi; --gpu ID picks another, --no-gpu leaves it out)"
    fi
  fi
  [ "$NO_GPU" = 0 ] || gpu_note="no gpu mode: --no-gpu"
  local -a modes=()
  if [ -n "$MODES_LIST" ]; then
    IFS=, read -ra modes <<<"$MODES_LIST"
    if [[ " ${modes[*]} " == *" gpu "* ]] && [ -z "$GPU_ID" ]; then
      die "$EXIT_REFUSED" "--modes gpu but no GPU to use ($gpu_note); give --gpu ID"
    fi
  else
    modes=(split no-split split-hw-demux no-split-hw-demux groups-1 groups-64)
    [ -z "$GPU_ID" ] || modes+=(gpu)
  fi
  if [ "$SKIP_HW_DEMUX" = 1 ]; then
    local -a kept=()
    for l in "${modes[@]}"; do [[ $l == *hw-demux ]] || kept+=("$l"); done
    modes=("${kept[@]}")
    [ "${#modes[@]}" -gt 0 ] || die "$EXIT_USAGE" "--skip-hw-demux leaves no mode to run (see --modes)"
  fi

  mkdir -p "$OUT" || die "$EXIT_USAGE" "cannot create --out $OUT"
  OUT=$(cd "$OUT" && pwd)
  mkdir -p "$OUT/steps"
  LOG_FILE=$OUT/run.log
  trap on_interrupt INT TERM HUP
  trap cleanup_children EXIT
  printf '%q ' "${cmdline[@]}" >"$OUT/command.txt"
  echo >>"$OUT/command.txt"
  printf '%s\n' "$devices" >"$OUT/devices.txt"
  say "$PROG: $RX_IF ($rx_dev port $rx_port) <- $TX_IF ($(if [ -n "$SSH_HOST" ]; then echo "on $SSH_HOST"; else echo "this host"; fi)); results in $OUT"
  local mode_opts='{}'
  local -a opts
  for l in "${modes[@]}"; do
    mapfile -t opts < <(mode_capture_args "$l" "$GPU_ID" "$THREADS")
    mode_opts=$(jq -c --arg m "$l" --argjson o "$(json_array "${opts[@]}")" '. + {($m): $o}' <<<"$mode_opts")
  done
  jq -n --argjson cl "$(json_array "${cmdline[@]}")" --arg started "$(date -Iseconds)" \
    --arg hostname "$(uname -n)" --arg rx_if "$RX_IF" --arg rx_device "$rx_dev" --arg rx_port "$rx_port" \
    --arg tx_if "$TX_IF" --arg sender "$(if [ -n "$SSH_HOST" ]; then echo "ssh $SSH_HOST"; else echo "this host"; fi)" \
    --arg speed "$speed" --argjson line_rate "$LINE_RATE" --arg ibvcap "$IBVCAP" \
    --arg groups "${MCAST[*]}" --arg antennas "${ANTENNAS[*]}" --argjson threads "$THREADS" \
    --argjson payload "$PAYLOAD" --argjson duration "$DURATION" --arg rates "${RATE_LABELS[*]}" \
    --arg rates_pps "${RATE_PPS[*]}" --arg modes "${modes[*]}" --argjson mode_options "$mode_opts" \
    --arg require "$REQUIRE" --argjson capture_args "$(json_array "${CAPTURE_EXTRA[@]}")" --arg gpu "$GPU_ID" \
    '{started: $started, finished: null, refused: false, interrupted: false,
      command_line: $cl,
      host: {hostname: $hostname, rx_if: $rx_if, rx_device: $rx_device, rx_port: ($rx_port | tonumber? // $rx_port),
             link_speed_mbps: (if $speed == "" then null else ($speed | tonumber) end),
             tx_if: $tx_if, sender: $sender, ibvcap: $ibvcap, gpu: (if $gpu == "" then null else ($gpu | tonumber) end)},
      traffic: {groups: ($groups | split(" ")), antennas: ($antennas | split(" ")), threads: $threads,
                payload_bytes: $payload, frame_bytes: ($payload + 106), streams: (($groups | split(" ") | length) * ($antennas | split(" ") | length) * $threads),
                duration_s: $duration, line_rate_pps: (if $line_rate == 0 then null else $line_rate end),
                rates: ($rates | split(" ")), rates_pps: ($rates_pps | split(" ") | map(tonumber)),
                capture_args: $capture_args},
      modes: ($modes | split(" ")), mode_options: $mode_options,
      require_pps: (if $require == "" then null else ($require | tonumber) end)}' >"$OUT/run.json"

  say "versions"
  collect_versions "$RX_IF" "$rx_dev" "$IBVCAP" "$GPU_ID" >"$OUT/versions.json"
  jq -r 'to_entries[] | "  \(.key): \(.value)"' "$OUT/versions.json" | while IFS= read -r l; do say "$l"; done

  say "preflight"
  check mlx5-device pass "$RX_IF is $rx_dev port $rx_port"
  if [ "$rx_state" = ACTIVE ] && [ "$rx_ll" = Ethernet ]; then
    check rx-port pass "$rx_dev port $rx_port ACTIVE Ethernet"
  else
    check rx-port fail "$rx_dev port $rx_port is ${rx_state:-?} ${rx_ll:-?}: it must be ACTIVE with link layer Ethernet (ibv_devinfo -v; check the cable and ethtool $RX_IF)"
  fi
  local min_mtu=$((PAYLOAD + 64 + 28))
  check_netdev rx-netdev "$RX_IF" "$(netdev_line "$devices" "$RX_IF")" "$min_mtu"
  local caps
  caps=$(device_block "$devices" "$rx_dev")
  if grep -q '^cannot open' <<<"$caps"; then
    check rx-verbs fail "$(grep '^cannot open' <<<"$caps" | head -n 1)"
  elif ! grep -q 'raw-packet QP: yes' <<<"$caps" || ! grep -q 'managed flow steering: yes' <<<"$caps"; then
    check rx-verbs fail "$rx_dev: $(grep 'raw-packet QP' <<<"$caps" | head -n 1 || echo "no capability lines"); both raw-packet QP and managed flow steering must be yes (docs/operations.md §8)"
  elif ! grep -q 'flow counters: yes' <<<"$caps"; then
    check rx-verbs warn "$rx_dev has no flow counters: no per-group NIC counts (out_of_buffer still counts every drop)"
  else
    check rx-verbs pass "$(grep 'raw-packet QP' <<<"$caps" | head -n 1)"
  fi
  # CAP_NET_RAW: root, or a file capability on the binary.
  if [ "$(id -u)" = 0 ]; then
    check permissions pass "running as root"
  elif command -v getcap >/dev/null 2>&1; then
    if getcap "$IBVCAP" 2>/dev/null | grep -q cap_net_raw; then
      check permissions pass "$(getcap "$IBVCAP")"
    else
      check permissions fail "not root and $IBVCAP has no cap_net_raw: run as root, or sudo setcap cap_net_raw,cap_ipc_lock=ep $IBVCAP"
    fi
  else
    check permissions warn "not root, and getcap is not installed to tell whether $IBVCAP has cap_net_raw"
  fi
  # Locked memory: 9088 bytes per receive slot x ring depth per QP
  # (docs/operations.md §2); one QP for every group's rules unless
  # --capture-args gives --queues.
  local qps=1 depth=4096 need_kib limit
  for ((l = 0; l < ${#CAPTURE_EXTRA[@]}; l++)); do
    case ${CAPTURE_EXTRA[l]} in
      --ring-depth | --num-blocks) depth=${CAPTURE_EXTRA[l + 1]:-4096} ;;
      --ring-depth=* | --num-blocks=*) depth=${CAPTURE_EXTRA[l]#*=} ;;
      --queues) qps=${CAPTURE_EXTRA[l + 1]:-1} ;;
      --queues=*) qps=${CAPTURE_EXTRA[l]#*=} ;;
    esac
  done
  is_uint "$depth" || depth=4096
  is_uint "$qps" || qps=1
  need_kib=$(((qps * depth * 9088 + 262144 * qps) / 1024))
  limit=$(ulimit -l)
  if [ "$(id -u)" = 0 ] || [ "$limit" = unlimited ]; then
    check memlock pass "locked-memory limit $limit$(is_uint "$limit" && echo " KiB")$([ "$(id -u)" = 0 ] && echo " (root: not limited)"); QPs: $qps, pinned about $((need_kib / 1024)) MiB"
  elif [ "$limit" -ge "$need_kib" ]; then
    check memlock pass "ulimit -l $limit KiB covers the QPs ($qps, about $need_kib KiB pinned)"
  else
    check memlock fail "ulimit -l is $limit KiB, and $qps QPs at ring depth $depth pin about $need_kib KiB: ulimit -l unlimited, or run as root (docs/operations.md §2)"
  fi
  # PCIe link of the capture NIC, from sysfs.
  local d=$SYSFS/class/net/$RX_IF/device cs ms cw mw
  cs=$(read_file_line "$d/current_link_speed")
  ms=$(read_file_line "$d/max_link_speed")
  cw=$(read_file_line "$d/current_link_width")
  mw=$(read_file_line "$d/max_link_width")
  if [ -z "$cs" ] || [ -z "$ms" ]; then
    check pcie info "link speed not readable in sysfs (sudo lspci -vv: LnkSta against LnkCap)"
  elif [ "$cs" = "$ms" ] && [ "$cw" = "$mw" ]; then
    check pcie pass "$cs x$cw (the card's maximum)"
  else
    check pcie warn "running at $cs x$cw, the card can do $ms x$mw: a slot, riser or BIOS problem (docs/operations.md §3)"
  fi
  if [ "$LINE_RATE" -gt 0 ]; then
    check link info "$RX_IF at $speed Mb/s: line rate $LINE_RATE packets/s of $((PAYLOAD + 106))-byte frames"
  else
    check link info "the link speed of $RX_IF is unknown ($SYSFS/class/net/$RX_IF/speed); max steps assume 1000000 packets/s"
  fi
  # The sender: its ibvcap and its interface, with every antenna address.
  local tx_devices tx_rc=0 remote_version
  if [ -n "$SSH_HOST" ]; then
    remote_version=$("$SSH_CMD" -o BatchMode=yes "$SSH_HOST" "$(printf '%q' "$REMOTE_IBVCAP") --version" </dev/null 2>&1) || tx_rc=$?
    remote_version=$(awk 'NF { print; exit }' <<<"$remote_version")
    if [ "$tx_rc" != 0 ]; then
      check sender-ibvcap fail "ssh $SSH_HOST: \`$REMOTE_IBVCAP --version\` failed (exit $tx_rc: $remote_version); check ssh (keys, BatchMode) and give --remote-ibvcap PATH"
      tx_devices=
    else
      check sender-ibvcap pass "$SSH_HOST: $remote_version"
      update_run '.host.sender_ibvcap = $v' --arg v "$remote_version"
      tx_devices=$("$SSH_CMD" -o BatchMode=yes "$SSH_HOST" "$(printf '%q' "$REMOTE_IBVCAP") devices" </dev/null 2>&1) || true
      printf '%s\n' "$tx_devices" >"$OUT/devices-sender.txt"
      update_run '.host.sender_kernel = $v' --arg v "$(or_unknown "$({ "$SSH_CMD" -o BatchMode=yes "$SSH_HOST" uname -r </dev/null 2>/dev/null || true; } | awk 'NF { print; exit }')")"
    fi
  else
    tx_devices=$devices
    check sender-ibvcap pass "this host: $(jq -r .ibvcap "$OUT/versions.json")"
  fi
  if [ -n "$SSH_HOST" ] && [ "$tx_rc" != 0 ]; then
    :
  else
    check_netdev tx-netdev "$TX_IF" "$(netdev_line "$tx_devices" "$TX_IF")" "$min_mtu" "${ANTENNAS[@]}"
  fi
  if [ -n "$GPU_ID" ]; then
    if [[ $ibvcap_gpu == "built without CUDA"* ]]; then
      check gpu fail "--gpu $GPU_ID but ibvcap was $ibvcap_gpu"
    else
      check gpu pass "GPU $GPU_ID: $(jq -r '.gpu_name + ", driver " + .gpu_driver' "$OUT/versions.json"); ibvcap: $ibvcap_gpu"
    fi
  else
    check gpu info "${gpu_note:-no gpu mode}"
  fi
  printf '%s\n' "${PREFLIGHT[@]}" | jq -s . >"$OUT/preflight.json"

  if [ "$INTERRUPTED" = 1 ]; then
    update_run '.interrupted = true'
    finish
  fi
  if jq -e 'any(.[]; .status == "fail")' "$OUT/preflight.json" >/dev/null; then
    if [ "$IGNORE_PREFLIGHT" = 0 ]; then
      update_run '.refused = true'
      say "$PROG: a preflight check failed; no step was run (fix it, or --ignore-preflight to run anyway)"
      finish
    fi
    say "$PROG: a preflight check failed; running anyway (--ignore-preflight)"
  fi

  say "steps: modes ${modes[*]}; rates ${RATE_LABELS[*]}; $DURATION s each"
  local index=0 mode r
  for mode in "${modes[@]}"; do
    for ((r = 0; r < ${#RATE_LABELS[@]}; r++)); do
      index=$((index + 1))
      run_step "$index" "$mode" "${RATE_LABELS[r]}" "${RATE_PPS[r]}"
      if [ "$INTERRUPTED" = 1 ]; then
        update_run '.interrupted = true'
        finish
      fi
      if [ "$STEP_STATUS" != pass ]; then
        say "  $mode: stopped at ${RATE_LABELS[r]} ($STEP_STATUS)"
        break
      fi
      if [ "$STEP_REACHED" = false ]; then
        say "  $mode: the sender could not reach ${RATE_LABELS[r]}; higher rates not tried"
        break
      fi
    done
  done
  finish
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
