#!/usr/bin/env bash
# scripts_cli_surface: what an operator's shell sees of the CLI.
#   1. The version: `ibvcap --version` and `ibvcap CMD --version` for every
#      command print "ibvcap VERSION" first, and VERSION is the one in
#      debian/changelog (the package's), so the two cannot drift.
#   2. The bash completion (debian/ibvcap.bash-completion), which reads
#      --help when completing: the commands are exactly those main.cpp
#      dispatches, and every command's completion offers its own long
#      options (a sample per command) and nothing that --help lacks.
# Usage: cli_surface.sh SOURCE_DIR IBVCAP_BINARY. Prints PASS or FAIL lines;
# exits 1 on any failure.
set -euo pipefail
src=$1
ibvcap=$(readlink -f "$2")
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# 1. Versions.
want=$(sed -nE '1s/^ibvcap \(([^)]+)\).*/\1/p' "$src/debian/changelog")
[ -n "$want" ] || fail "no version on the first line of debian/changelog"
for cmd in "" capture read gen devices doctor verify merge report ctl; do
  # shellcheck disable=SC2086 # an empty $cmd is no argument
  got=$("$ibvcap" $cmd --version | head -n 1)
  [ "$got" = "ibvcap $want" ] || fail "ibvcap $cmd --version says '$got', debian/changelog 'ibvcap $want'"
done

# 2. Completion, with the binary found as `ibvcap` on PATH.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
ln -s "$ibvcap" "$bin/ibvcap"
complete_words() { # WORD...: the completions of the last word
  PATH=$bin:$PATH bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ibvcap; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$src/debian/ibvcap.bash-completion" ibvcap "$@" | sort
}
commands=$(complete_words "" | grep -v '^--' | tr '\n' ' ')
[ "$commands" = "capture ctl devices doctor gen merge read report verify " ] ||
  fail "commands completed: '$commands', expected 'capture ctl devices doctor gen merge read report verify '"
for sample in "capture --user --interface --source --report --duration -i" \
  "read --overwrite --report -r" "gen --send --rate -w" "devices --verbose" "doctor --json --cpus" \
  "verify --help" "merge --expect --report --overwrite --html" "report --html --verify" \
  "ctl --timeout" "capture --control --schedule"; do
  read -r cmd opts <<<"$sample"
  offered=$(complete_words "$cmd" -)
  help=$("$ibvcap" "$cmd" --help)
  for o in $opts; do
    grep -qx -- "$o" <<<"$offered" || fail "ibvcap $cmd -<TAB> does not offer $o"
  done
  for o in $offered; do
    [ "$o" = --version ] && continue
    grep -qE -- "(^|[ ,])$o( |,|$)" <<<"$help" || fail "ibvcap $cmd -<TAB> offers $o, which --help lacks"
  done
  [ "$(complete_words "$cmd" --vers)" = --version ] || fail "ibvcap $cmd --vers<TAB> is not --version"
done

if [ "$failures" -gt 0 ]; then
  echo "cli_surface: $failures failures"
  exit 1
fi
echo "PASS cli_surface"
