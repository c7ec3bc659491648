#!/usr/bin/env bash
# e2e deps (issue 25 item 11): every tool that the tests, the scripts and the
# package build run comes from a Debian package that scripts/install-deps.sh
# installs, so that a new dependency cannot be forgotten. (A fresh Debian 12
# failed e2e_package: systemd-analyze and lintian were in no listed package.)
#
# The tools it checks:
#   every command that the shell scripts in test/e2e, test/scripts, scripts
#   and bench run, read from them by COMMANDS below: it splits a script as
#   bash does (quotes, $(...), here-documents, case patterns, [[ ]]) and sees
#   through timeout, setsid, env, exec, ip netns exec NS and lib.sh's
#   start/rx/tx; bash builtins and the scripts' own functions are not tools
#   every argument of require_tools, and the tools of the loops
#   `for t in A B ...; do command -v "$t"`
#   the commands that the C++ tests run (sh(dir, "TOOL ..."), run_command,
#   std::system, popen, require_tool, "command -v TOOL")
#   the programs CMake must find (find_program(... REQUIRED))
#   EXTRA: what none of that sees
# Each must be installed ("run scripts/install-deps.sh" otherwise), and the
# file that runs (dpkg -S, through symlinks and the /usr merge) must belong to
# a package that the packages=( ) list of install-deps.sh names, or one that
# every Debian has (Essential, or Priority required: in a minimal debootstrap),
# or one that PULLED_BY says a listed package depends on (checked with
# dpkg-query). The Build-Depends of debian/control are held to the same rule:
# without them scripts/package.sh needs root and the network (apt-get build-dep).
#
# Usage: deps.sh [SOURCE_DIR]. Reads files and dpkg's database only: no binary,
# no root, no network; about a second. Prints one line per problem, then
# "PASS deps" or "FAIL deps: N problems" (exit 1). DEPS_VERBOSE=1 also prints
# each tool with its package and where it is needed.
set -euo pipefail
export LC_ALL=C
T0=${EPOCHREALTIME/./}
SRC=$(readlink -f "${1:-$(dirname "$0")/../..}")
cd "$SRC"
command -v dpkg-query >/dev/null || { echo "FAIL deps: no dpkg-query: ibvcap builds and tests on Debian"; exit 1; }

# Tools that the readers below cannot see: "TOOL FILE-THAT-NEEDS-IT".
EXTRA=(
  "make debian/rules"        # #!/usr/bin/make -f, run by dpkg-buildpackage; cmake's Makefiles
  "tshark test/test_cli.cpp" # its "tshark -n -r ..." line is built over two lines
)
# Tools from a package that install-deps.sh does not name but a listed package
# depends on: [TOOL]=LISTED. The test checks that LISTED is listed and that its
# Depends (or Pre-Depends) name the tool's package; when that stops being so,
# the tool's package must go into the list.
declare -A PULLED_BY=(
  [readelf]=dpkg-dev      # binutils (test/e2e/usdt.sh, test_cli.cpp); also build-essential's
  [make]=build-essential  # make
  [sysctl]=cmake          # procps (scripts/testbed.sh, in the namespaces)
  [deluser]=tcpdump       # adduser (test/e2e/package.sh's cleanup; prometheus depends on it too)
  [delgroup]=tcpdump      # adduser
)
# Commands that the scripts run but a machine need not have: used only when
# present (command -v guards them).
OPTIONAL=(
  ccache     # scripts/package.sh: the compiler goes through it when installed
  nvidia-smi # scripts/hw-acceptance.sh: the gpu mode, on a host with an NVIDIA driver
)
# Words in command position that are not tools.
NOT_TOOLS=(
  /usr/bin/ibvcap # test/e2e/package.sh: the binary of the package it installed
)
# The reader's own check: commands it must find where they are (reached only
# through a wrapper). If a script no longer runs one, change the pair.
READER_CHECKS=(
  "sysctl scripts/testbed.sh"   # ip netns exec "$ns" sysctl
  "awk test/e2e/lib.sh"         # rx awk (in $(...))
  "systemd-analyze test/e2e/package.sh"
  "/usr/bin/time bench/run.sh"
)
SCRIPTS=(test/e2e/*.sh test/scripts/*.sh scripts/*.sh bench/*.sh)

PROBLEMS=()
problem() {
  PROBLEMS+=("$*")
  printf '%s\n' "$*"
}

# The packages of scripts/install-deps.sh: its packages=( ... ) array, read
# (not run): comments dropped, up to the closing parenthesis.
mapfile -t PACKAGES < <(awk '
  /^packages=\(/ { on = 1; sub(/^packages=\(/, "") }
  on { sub(/#.*/, ""); end = sub(/\).*/, ""); n = split($0, w, /[ \t]+/)
       for (k = 1; k <= n; k++) if (w[k] != "") print w[k]
       if (end) exit }' scripts/install-deps.sh)
[ ${#PACKAGES[@]} -gt 0 ] || { echo "FAIL deps: no packages=( ... ) array in scripts/install-deps.sh"; exit 1; }
declare -A LISTED=()
for p in "${PACKAGES[@]}"; do
  [[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || { echo "FAIL deps: '$p' in the packages of scripts/install-deps.sh is not a package name"; exit 1; }
  LISTED[$p]=1
done

# COMMANDS: the awk program that reads a bash script (above).
read -r -d '' COMMANDS <<'AWK' || true
# The commands of a bash script, read as bash splits it. Prints, tab-separated,
# KIND LINE WORD:
#   run   WORD is in command position
#   req   WORD is an argument of require_tools
#   for   VAR=WORD: WORD is in the list of `for VAR in ...`
#   func  the script defines the function WORD
# Commands in single-quoted strings (sh -c '...') and in here-documents are
# not seen.
function push(t, cl) { d++; T[d] = t; CL[d] = cl; P[d] = (t == "cmd"); W[d] = 0; PAT[d] = 0
  CASEP[d] = 0; DBL[d] = 0; CMD[d] = ""; ARGN[d] = 0; WRAP[d] = 0; SKIP[d] = 0; RT[d] = 0; FN[d] = 0
  DEP[d] = 0 }
function pop() { if (d > 0) d-- }
function ch(k) { return substr(s, i + k, 1) }
function emit(kind, w) { print kind "\t" line "\t" w }
# A word that begins with a quote, an expansion or a backslash: not a literal
# command name. W: inside such a word, up to its end.
function word_start() {
  if (T[d] != "cmd" || W[d]) return
  W[d] = 1
  if (RT[d] || (P[d] && SKIP[d])) return
  if (P[d]) { P[d] = 0; CMD[d] = "" } else ARGN[d]++
}
function word_end() {
  W[d] = 0
  if (RT[d]) RT[d] = 0; else if (P[d] && SKIP[d]) SKIP[d]--
}
# After a word in command position: what comes next is a command again?
function command_word(w) {
  CMD[d] = w; ARGN[d] = 0; WRAP[d] = 0; SKIP[d] = 0
  if (w ~ /^(!|\{|then|do|else|elif|if|while|until|time)$/) { P[d] = 1; return }
  P[d] = 0
  if (w == "case") { CASEP[d] = 1; return }
  if (w == "[[") { DBL[d] = 1; return }
  if (w == "function") { FN[d] = 1; return }
  if (w == "for") { FORV = ""; return }
  if (w ~ /^(\}|fi|done|esac|select|in)$/) return
  emit("run", w)
  # Commands that run the command after them: timeout DURATION, and lib.sh's
  # start LOG and rx/tx (ip netns exec).
  if (w ~ /^(timeout|setsid|env|nohup|nice|sudo|xargs|stdbuf|exec|start|rx|tx)$/) {
    P[d] = 1; WRAP[d] = 1; SKIP[d] = (w == "timeout" || w == "start")
  }
}
function arg_word(w) {
  ARGN[d]++
  if (FN[d]) { emit("func", w); FN[d] = 0; P[d] = 1; return }
  if (CASEP[d] && w == "in") { CASEP[d] = 0; PAT[d] = 1; P[d] = 1; return }
  if (DBL[d] && w == "]]") { DBL[d] = 0; return }
  if (CMD[d] == "require_tools") emit("req", w)
  if (CMD[d] == "for" && ARGN[d] == 1) FORV = w
  if (CMD[d] == "for" && ARGN[d] > 2) emit("for", FORV "=" w)
  if (CMD[d] == "ip" && ((ARGN[d] == 1 && w != "netns") || (ARGN[d] == 2 && w != "exec"))) CMD[d] = ""
  if (CMD[d] == "ip" && ARGN[d] == 2) { P[d] = 1; SKIP[d] = 1; WRAP[d] = 1 }
}
# Here-documents whose bodies start after the current line.
function heredocs(  k, j, body) {
  for (k = 1; k <= nh; k++) {
    while (i <= n) {
      j = index(substr(s, i + 1), "\n"); if (j == 0) { i = n + 1; break }
      body = substr(s, i + 1, j - 1); i += j; line++
      if (HS[k]) sub(/^\t+/, "", body)
      if (body == HD[k]) break
    }
  }
  nh = 0
}
BEGIN { RS = "\001" }
{ s = $0 }
END {
  n = length(s); line = 1; d = 0; nh = 0; push("cmd", "")
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1); t = T[d]
    if (c == "\n") line++
    if (t == "sq") { if (c == "'") pop(); continue }
    if (t == "asq") { if (c == "\\") i++; else if (c == "'") pop(); continue }
    if (c == "\\") {
      if (ch(1) == "\n") { line++; i++; continue }
      word_start(); i++; continue
    }
    if (t == "dq") {
      if (c == "\"") pop()
      else if (c == "$" && ch(1) == "(") { i++; if (ch(1) == "(") { i++; push("ar", "") } else push("cmd", ")") }
      else if (c == "$" && ch(1) == "{") { i++; push("pe", "") }
      else if (c == "`") push("cmd", "`")
      continue
    }
    if (c == "$") {
      word_start()
      if (ch(1) == "(") { i++; if (ch(1) == "(") { i++; push("ar", "") } else push("cmd", ")") }
      else if (ch(1) == "{") { i++; push("pe", "") }
      else if (ch(1) == "'") { i++; push("asq", "") }
      continue
    }
    if (c == "`") { if (CL[d] == "`") pop(); else push("cmd", "`"); continue }
    if (c == "\"" || c == "'") {
      word_start(); push(c == "\"" ? "dq" : "sq", ""); continue
    }
    if (t == "pe") { if (c == "{") DEP[d]++; else if (c == "}") { if (DEP[d]) DEP[d]--; else pop() } continue }
    if (t == "ar") {
      if (c == "(") DEP[d]++
      else if (c == ")") { if (DEP[d]) DEP[d]--; else { if (ch(1) == ")") i++; pop() } }
      continue
    }
    # cmd and arr: words, operators, comments
    if (c == " " || c == "\t" || c == "\n") {
      if (t == "cmd" && W[d]) word_end()
      if (c == "\n" && t == "cmd") { if (!PAT[d]) P[d] = 1; RT[d] = 0; if (nh) heredocs() }
      continue
    }
    if (t == "arr") {
      if (c == ")") pop()
      else if (c == "#" && ch(-1) ~ /[ \t\n(]/) { j = index(substr(s, i), "\n"); i += (j ? j - 2 : n) }
      continue
    }
    if (W[d]) {  # the rest of a word that began with a quote or an expansion
      if (c !~ /[;&|()<>]/) continue
      word_end()
    }
    if (c == "#") { j = index(substr(s, i), "\n"); i += (j ? j - 2 : n); continue }
    if (PAT[d]) {  # a case pattern, up to its ')'
      if (c == ")") { PAT[d] = 0; P[d] = 1; continue }
      if (c ~ /[(|]/) continue
      if (match(substr(s, i), /^[^ \t\n;&|()<>"'$`\\]+/)) {
        w = substr(s, i, RLENGTH); i += RLENGTH - 1
        if (w == "esac") { PAT[d] = 0; P[d] = 0 }
      }
      continue
    }
    if (c == ";") {
      if (ch(1) == ";" || ch(1) == "&") { PAT[d] = 1; i += (ch(2) == "&") ? 2 : 1 }
      P[d] = 1; RT[d] = 0; CASEP[d] = 0; continue
    }
    if (c == "&" || c == "|") {
      if (c == "&" && ch(1) == ">") { i++; RT[d] = 1; if (ch(1) == ">") i++; continue }
      if (DBL[d]) { if (ch(1) == c) i++; continue }
      if (ch(1) == c || (c == "|" && ch(1) == "&")) i++
      P[d] = 1; RT[d] = 0; continue
    }
    if (c == "(") {
      if (DBL[d]) continue
      if (ch(1) == "(") { i++; push("ar", ""); continue }
      push(P[d] ? "cmd" : "arr", ")"); continue
    }
    if (c == ")") { if (!DBL[d] && d > 1 && CL[d] == ")") pop(); continue }
    if (c == "<" || c == ">") {
      if (DBL[d]) continue
      if (ch(1) == "(") { i++; RT[d] = 0; push("cmd", ")"); continue }
      if (c == "<" && ch(1) == "<" && ch(2) == "<") { i += 2; RT[d] = 1; continue }
      if (c == "<" && ch(1) == "<") {  # a here-document: its delimiter word
        i++; strip = 0; if (ch(1) == "-") { i++; strip = 1 }
        while (ch(1) == " ") i++
        match(substr(s, i + 1), /^[^ \t\n;&|()<>]+/); w = substr(s, i + 1, RLENGTH); i += RLENGTH
        gsub(/["'\\]/, "", w); nh++; HD[nh] = w; HS[nh] = strip; continue
      }
      while (ch(1) ~ /[<>&|]/) i++
      if (substr(s, i, 1) == "&" && ch(1) ~ /[0-9-]/) { while (ch(1) ~ /[0-9-]/) i++; continue }
      RT[d] = 1; continue
    }
    # a word that starts with a plain character
    if (!match(substr(s, i), /^[^ \t\n;&|()<>"'$`\\]+/)) continue
    w = substr(s, i, RLENGTH); i += RLENGTH - 1
    nc = ch(1); whole = (nc == "" || nc ~ /[ \t\n;&|)<>`]/)
    if (w ~ /^[0-9]+$/ && nc ~ /[<>]/) continue                   # 2>file: a redirection
    if (RT[d]) { if (whole) RT[d] = 0; else W[d] = 1; continue }  # a redirection's target
    if (nc == "(" && w ~ /=$/) { i++; push("arr", ")"); continue } # NAME=( ... )
    if (nc == "(" && ch(2) == ")" && P[d]) { emit("func", w); i += 2; continue }
    if (P[d] && w ~ /^[A-Za-z_][A-Za-z0-9_]*\+?=/) { if (!whole) W[d] = 1; continue }
    if (P[d] && WRAP[d] && w ~ /^-/) {  # an option of the wrapper; these take a value
      if ((CMD[d] " " w) ~ /^(env -u|timeout -[sk]|nice -n|sudo -[ug]|xargs -[IdEa])$/) SKIP[d]++
      if (!whole) W[d] = 1; continue
    }
    if (P[d] && SKIP[d]) { if (whole) SKIP[d]--; else W[d] = 1; continue }
    if (!whole) { word_start(); continue }
    if (P[d]) command_word(w); else arg_word(w)
  }
}
AWK

# NEED[TOOL]: where it is needed first, FILE:LINE.
declare -A NEED=() FUNCS=() FOUND=()
need() { [ -n "${NEED[$1]:-}" ] || NEED[$1]=$2; }
for f in "${SCRIPTS[@]}"; do
  mapfile -t text <"$f"
  while IFS=$'\t' read -r kind line word; do
    case $kind in
      run | req)
        need "$word" "$f:$line"
        FOUND["$word $f"]=1
        ;;
      func) FUNCS[$word]=1 ;;
      for) # a list of tools when the loop checks them: command -v "$VAR"
        re="command -v \"?\\\$\\{?${word%%=*}([^A-Za-z0-9_]|$)"
        for ((k = line - 1; k < line + 3 && k < ${#text[@]}; k++)); do
          if [[ ${text[k]} =~ $re ]]; then
            need "${word#*=}" "$f:$line"
            break
          fi
        done
        ;;
    esac
  done < <(awk "$COMMANDS" "$f")
done
for pair in "${READER_CHECKS[@]}"; do
  [ -n "${FOUND[$pair]:-}" ] ||
    problem "the command reader of test/e2e/deps.sh did not find ${pair% *} in ${pair#* }: fix the reader (or READER_CHECKS, if that file no longer runs it)"
done
# The C++ tests: the first word of the command lines they run.
re='"\(?(command -v )?([A-Za-z][A-Za-z0-9._+-]*)$'
while IFS=: read -r f line text; do
  [[ $text =~ $re ]] && need "${BASH_REMATCH[2]}" "$f:$line"
done < <(grep -noE '(\bsh\([a-z_]+, |run_command\(|system\(|popen\(\(?|require_tool\()"\(?(command -v )?[A-Za-z][A-Za-z0-9._+-]*' \
  test/*.cpp test/*.hpp)
# CMake: find_program(VAR NAME ... REQUIRED).
re='find_program\([A-Za-z0-9_]+ ([A-Za-z0-9._+-]+) '
while IFS=: read -r f line text; do
  [[ $text =~ $re ]] && need "${BASH_REMATCH[1]}" "$f:$line"
done < <(grep -nE 'find_program\(.*REQUIRED' -- CMakeLists.txt */CMakeLists.txt)
for e in "${EXTRA[@]}"; do need "${e%% *}" "${e#* }"; done

# What is not a tool: builtins and keywords, functions, the lists above, and
# words that are no command name (a relative path, a number).
while read -r w; do unset 'NEED[$w]'; done < <(compgen -b; compgen -k)
for w in "${!FUNCS[@]}" "${OPTIONAL[@]}" "${NOT_TOOLS[@]}"; do unset 'NEED[$w]'; done
for w in "${!NEED[@]}"; do
  [[ $w =~ ^(/[A-Za-z0-9_./+-]+|[A-Za-z_][A-Za-z0-9_.+-]*)$ ]] || unset 'NEED[$w]'
done

# Each tool's files: every one on PATH (or the absolute name), and for a name
# of the alternatives system (awk) every alternative; as found and resolved
# (one readlink), in both halves of the /usr merge.
declare -A FILES=() PATHS=()
found=()
IFS=: read -r -a dirs <<<"$PATH"
for t in "${!NEED[@]}"; do
  if [[ $t == /* ]]; then
    [ -x "$t" ] && FILES[$t]=$t
  else
    for dir in "${dirs[@]}"; do
      [ -x "$dir/$t" ] && [ ! -d "$dir/$t" ] && FILES[$t]+="$dir/$t "
    done
    if [ -n "${FILES[$t]:-}" ] && [ -L "/etc/alternatives/$t" ]; then
      FILES[$t]+="$(update-alternatives --list "$t" 2>/dev/null | tr '\n' ' ')"
    fi
  fi
  # shellcheck disable=SC2206 # the paths have no spaces
  found+=(${FILES[$t]:-})
done
declare -A RESOLVED=()
if [ ${#found[@]} -gt 0 ]; then
  mapfile -t real < <(readlink -f -- "${found[@]}")
  for k in "${!found[@]}"; do RESOLVED[${found[k]}]=${real[k]:-${found[k]}}; done
fi
ALL=()
for t in "${!FILES[@]}"; do
  for p in ${FILES[$t]}; do
    for q in "$p" "${RESOLVED[$p]}"; do
      PATHS[$t]+="$q "
      case $q in
        /usr/bin/* | /usr/sbin/*) PATHS[$t]+="${q#/usr} " ;;
        /bin/* | /sbin/*) PATHS[$t]+="/usr$q " ;;
      esac
    done
  done
  # shellcheck disable=SC2206
  ALL+=(${PATHS[$t]})
done
# Their packages, from one dpkg -S: lines "pkg1, pkg2:arch: /path".
declare -A OWNERS=() OWNED=()
while IFS= read -r l; do
  [[ $l == *": /"* && $l != diversion* ]] || continue
  pkgs=${l%%: /*}
  for p in ${pkgs//,/ }; do
    OWNERS[/${l#*: /}]+="${p%%:*} "
    OWNED[${p%%:*}]=1
  done
done < <([ ${#ALL[@]} -eq 0 ] || dpkg -S "${ALL[@]}" 2>/dev/null || true)

# debian/control's Build-Depends, as clauses of alternatives.
builddeps=$(awk '/^Build-Depends:/ { on = 1; sub(/^Build-Depends:/, ""); print; next }
  on && /^[ \t]/ { print; next } { on = 0 }' debian/control)
builddeps=${builddeps//$'\n'/ }
IFS=, read -r -a CLAUSES <<<"$builddeps"
for k in "${!CLAUSES[@]}"; do
  c=${CLAUSES[k]}
  while [[ $c =~ ^(.*)(\([^\)]*\)|\[[^]]*\]|\<[^\>]*\>)(.*)$ ]]; do c=${BASH_REMATCH[1]}${BASH_REMATCH[3]}; done
  c=${c//[[:space:]]/}
  CLAUSES[k]=$c
  [ -z "$c" ] || for p in ${c//|/ }; do OWNED[$p]=1; done
done

# BASE: Essential or Priority required, on every Debian system.
declare -A BASE=()
while read -r p e prio; do
  if [ "$e" = yes ] || [ "$prio" = required ]; then BASE[$p]=1; fi
done < <(dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' "${!OWNED[@]}" 2>/dev/null || true)
# depends_on LISTED PKG: the installed LISTED depends (or pre-depends) on PKG.
depends_on() {
  local deps
  deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$1" 2>/dev/null) || return 1
  [[ ", ${deps//|/,}" =~ ,\ *"$2"[\ :,] ]]
}

for t in $(printf '%s\n' "${!NEED[@]}" | sort); do
  where=${NEED[$t]}
  if [ -z "${PATHS[$t]:-}" ]; then
    problem "$t is needed by $where but is not installed: run scripts/install-deps.sh (if it is still missing, add its package to the packages list there)"
    continue
  fi
  ok=0 first=""
  for q in ${PATHS[$t]}; do
    for p in ${OWNERS[$q]:-}; do
      [ -n "$first" ] || first=$p
      if [ -n "${LISTED[$p]:-}" ] || [ -n "${BASE[$p]:-}" ]; then ok=1; fi
    done
  done
  via=${PULLED_BY[$t]:-}
  if [ "$ok" = 1 ]; then
    [ "${DEPS_VERBOSE:-0}" = 0 ] || printf '%-24s %-22s %s\n' "$t" "$first" "$where"
    continue
  fi
  [ "${DEPS_VERBOSE:-0}" = 0 ] || [ -z "$via" ] || printf '%-24s %-22s %s (%s)\n' "$t" "$first" "$where" "via $via"
  if [ -z "$first" ]; then
    problem "$t (${PATHS[$t]%% *}) is needed by $where but belongs to no Debian package: install it with apt, from a package in the packages list of scripts/install-deps.sh"
  elif [ -z "$via" ]; then
    problem "$t (from package $first) is needed by $where but scripts/install-deps.sh does not install $first: add it to the packages list"
  elif [ -z "${LISTED[$via]:-}" ] || ! depends_on "$via" "$first"; then
    problem "$t (from package $first) is needed by $where but scripts/install-deps.sh does not install $first, and $via (PULLED_BY in test/e2e/deps.sh) does not bring it in: add $first to the packages list"
  fi
done

# The Build-Depends: an alternative of each listed, provided by a listed
# package (debhelper-compat), or on every system.
declare -A PROVIDED=()
while read -r p; do PROVIDED[$p]=1; done < <(dpkg-query -W -f='${Provides}\n' "${PACKAGES[@]}" 2>/dev/null |
  tr ',' '\n' | awk '{ sub(/:.*/, "", $1); if ($1 != "") print $1 }' || true)
for c in "${CLAUSES[@]}"; do
  [ -n "$c" ] || continue
  ok=0
  for p in ${c//|/ }; do
    if [ -n "${LISTED[$p]:-}" ] || [ -n "${PROVIDED[$p]:-}" ] || [ -n "${BASE[$p]:-}" ]; then ok=1; fi
  done
  [ "$ok" = 1 ] ||
    problem "$c (a Build-Depends of debian/control) is needed by scripts/package.sh but scripts/install-deps.sh does not install it: add it to the packages list"
done

secs() {
  local d=$((${EPOCHREALTIME/./} - T0))
  printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000))
}
if [ ${#PROBLEMS[@]} -gt 0 ]; then
  echo "FAIL deps: ${#PROBLEMS[@]} problem$([ ${#PROBLEMS[@]} = 1 ] || echo s) ($(secs) s)"
  exit 1
fi
echo "PASS deps: ${#NEED[@]} tools and the Build-Depends come from the ${#PACKAGES[@]} packages of scripts/install-deps.sh or the base system ($(secs) s)"
