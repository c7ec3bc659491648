#!/usr/bin/env bash
# e2e gpu_standin: the GPU payload path's logic on a host without a GPU. The
# live capture runs with --gpu-standin --gpu-verify: every CODIF frame goes to
# its antenna's block ring (host memory), a consumer thread takes each block
# and checks the generator's payload pattern in every present slot. With loss,
# duplicates and reordering injected, asserts: exit 3 (the injected loss), no
# payload byte off the pattern, every distinct frame captured is in a block
# (placed = codif - duplicates), nothing too late / ring full, and blocks were
# consumed for all six antennas of both groups (a ring per group and antenna).
# IBVCAP_E2E_GPU="--gpu 0" runs it on a GPU instead (scripts/gpu-check.sh).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$@"

MCAST=(239.17.0.1:36001 239.17.0.2:36001)  # two groups: a ring per (group, antenna)
GEN=(--antennas 6 --threads 2 -c 1000 --loss 0.01 --duplicate 0.01 --reorder 0.01 --seed 5
  --payload 2048 --nchan 4)
read -ra GPU_ARGS <<<"${IBVCAP_E2E_GPU:---gpu-standin}"
testbed_up

gen_reference

start capture.log rx "$IBVCAP" capture --source pcap -i "$RX_IF" --report "$WORK/r.json" \
  -c "$PACKETS" --duration 60 "${GPU_ARGS[@]}" --gpu-verify --frames-per-block 32 --gpu-blocks 8 \
  --block-threads 2 "${MCAST[@]}"
CAPTURE=$STARTED
wait_for_join "$CAPTURE" 15 "${MCAST[@]}"
send_traffic 60 --rate 20000
finish "$CAPTURE" 30
expect_eq "capture exit code (3 = the injected loss)" "$RC" 3

R=$WORK/r.json
expect_eq "payload bytes off the pattern" "$(j "$R" .totals.payload_mismatches)" 0
expect_eq "totals.packets" "$(j "$R" .totals.packets)" "$PACKETS"
counter() { jq "[.source_counters[] | select(.name | test(\"^blocks/.*/$1$\")) | .value] | add" "$R"; }
distinct=$(($(j "$R" .totals.codif) - $(j "$R" .totals.duplicates)))
expect_eq "frames placed in block rings (codif - duplicates)" "$(counter placed)" "$distinct"
expect_eq "frames too late for their block" "$(counter too_late)" 0
expect_eq "frames dropped on a full ring" "$(counter ring_full)" 0
expect_eq "block rings (2 groups x 6 antennas)" \
  "$(jq '[.source_counters[] | select(.name | test("^blocks/.*/placed$"))] | length' "$R")" 12
expect_eq "duplicates seen by the rings (the injected ones)" "$(counter duplicates)" "$(j "$R" .totals.duplicates)"
jq -e '.notes[] | select(test("blocks consumed, 0 payload bytes off"))' "$R" >/dev/null ||
  fail "no note on the blocks consumed: $(jq -c .notes "$R")"
say "$distinct frames in block rings; every present slot matches the generator's pattern"
pass
