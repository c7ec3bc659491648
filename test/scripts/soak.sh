#!/usr/bin/env bash
# Tests of bench/soak.sh (see test/scripts/CMakeLists.txt):
#   soak.sh SOURCE_DIR judge              the verdict on sample tables (no root, < 1 s)
#   soak.sh SOURCE_DIR live IBVCAP        a 30 s soak that passes and a 20 s one with
#                                         injected loss (no outputs) that fails (root, ~60 s)
# Prints "ok"/"FAIL" per check and "N passed, M failed" last; exit 1 on any failure.
set -uo pipefail
export LC_ALL=C
src=$(readlink -f "$1")
mode=$2
soak=$src/bench/soak.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/ibvcap-test-soak.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() {
  echo "ok   $1"
  passed=$((passed + 1))
}
bad() {
  echo "FAIL $1"
  failed=$((failed + 1))
}

# judge NAME WARMUP EXPECTED_REGEX (empty: no finding) <<< TABLE
judge_case() {
  local name=$1 warm=$2 want=$3 got rc=0
  cat >"$work/samples.tsv"
  got=$(bash "$soak" --judge "$work/samples.tsv" "$warm" 8) || rc=$?
  if [ "$rc" != 0 ]; then
    bad "$name: --judge exited $rc: $got"
  elif [ -z "$want" ] && [ -z "$got" ]; then
    ok "$name"
  elif [ -n "$want" ] && [ "$(wc -l <<<"$got")" = 1 ] && grep -qE "$want" <<<"$got"; then
    ok "$name: $got"
  else
    bad "$name: expected '${want:-nothing}', got '$got'"
  fi
}

if [ "$mode" = judge ]; then
  # Columns: t_s rss_kib fds threads (the rest is ignored). Warm-up 20 s.
  judge_case "flat after the warm-up passes" 20 "" <<'EOF'
# t_s rss_kib fds threads
0	278000	20	2
10	540000	20	2
20	545000	20	2
30	545000	20	2
40	546000	20	2
EOF
  judge_case "growth during the warm-up is not held against it" 20 "" <<'EOF'
0	100000	18	1
10	400000	19	2
20	545000	20	2
30	545100	20	2
EOF
  judge_case "RSS 8 MiB over the reference passes (the slack)" 20 "" <<'EOF'
20	545000	20	2
30	553192	20	2
EOF
  judge_case "RSS 9 MiB over the reference fails" 20 '^RSS grew after the warm-up: 532\.2 MiB at t=20s, 541\.0 MiB at t=40s \(537\.1 at the end\), more than 8 MiB$' <<'EOF'
20	545000	20	2
30	548000	20	2
40	554000	20	2
50	550000	20	2
EOF
  judge_case "one file fewer (a rotation closes before it opens) passes" 20 "" <<'EOF'
20	545000	20	2
30	545000	19	2
40	545000	20	2
EOF
  judge_case "one more open file fails" 20 '^open files grew from 20 \(t=20s\) to 21 \(t=40s\)$' <<'EOF'
20	545000	20	2
30	545000	20	2
40	545000	21	2
50	545000	22	2
EOF
  judge_case "a thread more fails" 20 '^threads changed from 2 \(t=20s\) to 3 \(t=30s\)$' <<'EOF'
20	545000	20	2
30	545000	20	3
EOF
  judge_case "a thread fewer fails" 20 '^threads changed from 2 \(t=20s\) to 1 \(t=30s\)$' <<'EOF'
20	545000	20	2
30	545000	20	1
EOF
  judge_case "a row of the capture stopping is not judged" 20 "" <<'EOF'
20	545000	20	2	100	10000	600	run
30	545000	20	2	200	10000	600	run
40	380000	6	1	300	10000	600	stop
EOF
  judge_case "no sample after the warm-up fails" 20 '^too few samples after the warm-up of 20 s' <<'EOF'
0	278000	20	2
10	540000	20	2
20	545000	20	2
EOF
fi

if [ "$mode" = live ]; then
  ibvcap=$(readlink -f "$3")
  # A low rate and small files: the test checks the soak's plumbing (testbed,
  # sampling, verdict, cleanup), not the machine. The warm-up is then 17 s
  # (one and a half cycles through the writer's pool, + 5 s).
  common=(env IBVCAP="$ibvcap" SOAK_RATE=4000 SOAK_INTERVAL=5 SOAK_ROTATE_MB=4 SOAK_ROTATE_FILES=2 SOAK_DIR="$work")
  # soak_case NAME LOG EXPECTED_RC EXPECTED_LAST_LINE_REGEX ENV...: one soak
  # with these environment settings added; its last line and exit code judged.
  soak_case() {
    local name=$1 log=$work/$2 want_rc=$3 want=$4 rc=0 last
    shift 4
    "${common[@]}" "$@" bash "$soak" >"$log" 2>&1 || rc=$?
    last=$(tail -n 1 "$log")
    if [ "$rc" = "$want_rc" ] && grep -q "$want" <<<"$last"; then
      ok "$name: $last"
    else
      bad "$name: exit $rc, last line '$last'"
      sed 's/^/    /' "$log"
    fi
  }
  soak_case "a 30 s soak passes" pass.log 0 \
    '^soak: PASS: 120000 frames in 30 s at 4000 frames/s, none lost' SOAK_SECONDS=30
  # The table: a row every 5 s from 0 to 30, RSS > 0, the same threads.
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 7' "$work/pass.log" | wc -l)
  if [ "$rows" -ge 6 ] && [ "$rows" -le 8 ]; then ok "the table has $rows rows"; else bad "the table has $rows rows, expected 6-8"; fi
  soak_case "injected loss fails the soak" fail.log 1 \
    '^soak: FAIL: the capture exited 3; verdict loss' \
    SOAK_SECONDS=20 SOAK_FORMAT=none SOAK_GEN_OPTS="--loss 0.001"
  # Cleanup: no testbed, no process, no work directory left behind.
  if ip netns list | grep -q '^soak[0-9]*-'; then bad "a soak testbed was left: $(ip netns list | grep '^soak')"; else ok "no testbed left"; fi
  left=$(find "$work" -maxdepth 1 -name 'ibvcap-soak.*' | wc -l)
  if [ "$left" = 0 ]; then ok "no work directory left"; else bad "$left work directories left in $work"; fi
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
