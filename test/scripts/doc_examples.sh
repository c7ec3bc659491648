#!/usr/bin/env bash
# scripts_doc_examples (issue 40 item 6): every `ibvcap COMMAND ...` line in
# the fenced code blocks of README.md and docs/*.md, as typed, through the
# binary's own parser: `ibvcap --parse-only COMMAND ...` (capture/main.cpp)
# checks each option is one COMMAND has, with a value of its type, and the
# GROUP:PORT list as COMMAND reads it, and runs nothing (no file is opened or
# made, no device touched). Each line must give exit 0 and say it parses.
#
# A line is a command when `ibvcap COMMAND` starts it, after a `$ ` prompt or
# a wrapper (sudo, env, ip netns exec NS, numactl OPTIONS, VAR=value). What it
# is read as, each step printed with the line:
#   - continuation lines (a trailing \) are joined; a trailing ` # comment`
#     and `&` are left off; `$(...)` (a number the shell computes: -c) is 1000;
#   - a synopsis's description (the text after a gap of two or more spaces
#     once the command has an argument, as in docs/formats.md's list of
#     commands) is left off; `A | -B` (options that are alternatives) parses
#     each side; `|` before anything else ends the command (a shell pipe);
#   - `[options]`, `...` and `…` standing alone (more options) are left out;
#     `[X]` is given as X, `X...` as X; GROUP:PORT is 239.17.0.1:36001.
#     Other placeholders (IF, DIR, FILE, REPORT.json) are option values and
#     reports' names: they parse as typed.
# Every other line of a fenced block that names `ibvcap COMMAND` (a
# message ibvcap prints, a diagram, a comment) is listed as not a command.
# Nothing is skipped without a line saying so.
# Usage: doc_examples.sh SOURCE_DIR IBVCAP_BINARY. Prints one line per
# command and a count; exits 1 on any failure. Under a second.
set -euo pipefail
src=$1
ibvcap=$(readlink -f "$2")
commands='capture|read|gen|devices|doctor|verify|merge|report|ctl'
failures=0 parsed=0 others=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# FILE:LINE<TAB>text of each fenced line that names ibvcap COMMAND, with its
# continuation lines joined.
extract() {
  local f
  for f in "$src/README.md" "$src"/docs/*.md; do
    awk -v file="${f#"$src"/}" -v re="ibvcap +($commands)" '
      /^[[:space:]]*```/ { fenced = !fenced; cont = ""; next }
      !fenced { next }
      {
        text = $0
        if (cont != "") { sub(/^[[:space:]]+/, "", text); text = cont " " text }
        else { at = FNR }
        if (sub(/[[:space:]]*\\[[:space:]]*$/, "", text)) { cont = text; next }
        cont = ""
        if (text ~ re) printf "%s:%d\t%s\n", file, at, text
      }' "$f"
  done
}

# Parses one command (its words after "ibvcap"); `shown` says where it is from.
parse_one() {
  local shown=$1
  shift
  local out rc=0
  out=$("$ibvcap" --parse-only "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "the command line parses" <<<"$out"; then
    fail "$shown: ibvcap $* (exit $rc): $out"
    return
  fi
  parsed=$((parsed + 1))
  echo "parsed  $shown: ibvcap $*"
}

while IFS=$'\t' read -r where text; do
  line=${text#"${text%%[! ]*}"}
  line=${line#\$ }
  prefix=${line%%ibvcap *}
  rest=${line#"$prefix"ibvcap }
  rest=${rest#"${rest%%[! ]*}"}
  word=${rest%%[ :]*}
  if [[ ! $prefix =~ ^((sudo|env|ip\ netns\ exec\ [^\ ]+|numactl(\ +-[^\ ]+)*|[A-Za-z_][A-Za-z0-9_]*=[^\ ]*)\ +)*$ ]] ||
    [[ ! $word =~ ^($commands)$ ]] || [[ ${rest:${#word}:1} == : ]]; then
    others=$((others + 1))
    echo "not a command (a message, a diagram or a comment)  $where: $text"
    continue
  fi
  notes=() alt_words=()
  args=${rest#"$word"}
  args=${args#"${args%%[! ]*}"}
  [[ $args != '#'* ]] || args=
  args=${args%% \#*}
  args=${args%"${args##*[! ]}"}
  args=${args%&}
  args=${args%"${args##*[! ]}"}
  if [[ $args =~ \$\([^\)]*\) ]]; then
    args=${args//"${BASH_REMATCH[0]}"/1000}
    notes+=("${BASH_REMATCH[0]} as 1000")
  fi
  if [[ $args =~ ^(.*[^\ ])\ {2,}([^\ ].*)$ ]]; then
    args=${BASH_REMATCH[1]}
    notes+=("a synopsis; its description left off: ${BASH_REMATCH[2]}")
  fi
  if [[ $args == *[\'\"\;\<\>\`]* ]] || [[ $args == *'&&'* ]]; then
    fail "$where: quotes or shell syntax this script does not read: $text"
    continue
  fi
  # Alternatives: `A | -B` parses A and B; `A | cmd` is a pipe: A.
  alternatives=()
  while [[ $args == *' | '* ]]; do
    left=${args%% | *}
    right=${args#* | }
    alternatives+=("$left")
    if [[ $right != -* ]]; then
      notes+=("a pipe: what follows | is not ibvcap's")
      args=
      break
    fi
    args=$right
    notes+=("alternatives either side of |")
  done
  [ -z "$args" ] && [ "${#alternatives[@]}" -gt 0 ] || alternatives+=("$args")
  for alt in "${alternatives[@]}"; do
    read -ra given <<<"$alt"
    words=("$word")
    for w in "${given[@]}"; do
      case $w in
        '[options]' | '...' | '…')
          notes+=("$w left out")
          continue
          ;;
      esac
      typed=$w
      w=${w//[\[\]]/}
      w=${w%...}
      w=${w%…}
      [ "$w" != GROUP:PORT ] || w=239.17.0.1:36001
      [ "$w" = "$typed" ] || notes+=("$typed as $w")
      [ -z "$w" ] || words+=("$w")
    done
    alt_words+=("${words[*]}")
  done
  if [ "${#notes[@]}" -gt 0 ]; then
    joined=$(printf '%s; ' "${notes[@]}")
    echo "        $where: read as typed but: ${joined%; }"
  fi
  for w in "${alt_words[@]}"; do
    read -ra words <<<"$w"
    parse_one "$where" "${words[@]}"
  done
done < <(extract)

# The docs show these; a script that found none of them reads the docs wrong.
[ "$parsed" -ge 40 ] || fail "only $parsed command lines parsed: is the extraction broken?"
echo "doc_examples: $parsed command lines parsed, $others lines naming ibvcap that are not commands (listed above), $failures failures"
[ "$failures" -eq 0 ]
