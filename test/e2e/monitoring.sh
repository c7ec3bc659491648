#!/usr/bin/env bash
# e2e monitoring: the site's monitoring files (docs/operations.md, "A site")
# against the metrics the real binary writes. Usage:
#   monitoring.sh IBVCAP_BINARY SOURCE_DIR rules|rules_test|dashboard
# rules       promtool check rules tools/prometheus/ibvcap-rules.yml; every
#             alert has a severity, a summary and a description; every series
#             its expressions name is one ibvcap writes, with labels it has
#             (node_exporter's NODE_EXPORTER_SERIES excepted, below)
# rules_test  promtool test rules tools/prometheus/ibvcap-rules.test.yml: each
#             alert fires on a synthetic series and stays silent on clean ones
# dashboard   tools/grafana/ibvcap.json is JSON, its panel ids are unique, every
#             panel and target queries the ${datasource} variable, the
#             variables datasource, instance and run exist, every PromQL
#             expression (the targets' and the variables' label_values
#             queries) parses (promtool, Grafana's variables replaced) and names
#             only series ibvcap writes, with labels they have, and every
#             selector of a panel takes the instance and run variables
# "Series ibvcap writes" are read from a metrics file that this binary writes
# here (gen -w, then read -F codif --metrics-file), never from a list kept by
# hand; the labels instance and job come from the scrape. A failure names the
# panel (or alert) and the series or label. Needs promtool (Debian's
# `prometheus`, scripts/install-deps.sh) and fails, saying so, without it.
# No namespace, no root; a few seconds.
MODE=${3:-}
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2"
TEST=monitoring_$MODE
command -v promtool >/dev/null ||
  fail "promtool is not installed: run scripts/install-deps.sh (Debian package prometheus)"

RULES=$SRC/tools/prometheus/ibvcap-rules.yml
RULES_TEST=$SRC/tools/prometheus/ibvcap-rules.test.yml
DASHBOARD=$SRC/tools/grafana/ibvcap.json
# node_exporter's own series that the rules may use: its textfile collector's
# error flag (a file it cannot read takes ibvcap's series away) and file times.
NODE_EXPORTER_SERIES=(node_textfile_scrape_error node_textfile_mtime_seconds)
# Labels every scraped series has besides the file's own.
SCRAPE_LABELS=(instance job)

# metrics_file: $WORK/textfile/ibvcap.prom written by the binary under test
# (2 groups x 2 antennas x 2 threads, no loss: exit 0), and SERIES, its series
# as JSON {NAME: [LABEL...]} from the sample lines (not the HELP/TYPE lines).
metrics_file() {
  MCAST=(239.17.0.1:36001 239.17.0.2:36001)
  GEN=(--antennas 2 --threads 2 -c 200 --payload 1024)
  gen_reference
  mkdir -p "$WORK/textfile"
  M=$WORK/textfile/ibvcap.prom
  local rc=0
  "$IBVCAP" read -q -r "$WORK/ref.pcap" -F codif -o "$WORK/out" --report "$WORK/r.json" \
    --metrics-file "$M" >"$WORK/read.log" 2>&1 || rc=$?
  expect_eq "exit code of ibvcap read --metrics-file" "$rc" 0
  SERIES=$(awk '
    /^#/ || NF == 0 { next }
    { line = $0; sub(/[ \t][^ \t]+([ \t][^ \t]+)?$/, "", line)  # the value (and a timestamp)
      name = line; sub(/\{.*/, "", name); labels = ""
      if (index(line, "{")) {
        labels = substr(line, index(line, "{") + 1); sub(/\}$/, "", labels)
        gsub(/"([^"\\]|\\.)*"/, "", labels); gsub(/[= ]/, "", labels)
      }
      print name "\t" labels }' "$M" |
    jq -R -n 'reduce (inputs | split("\t")) as [$n, $l]
      ({}; .[$n] = ((.[$n] // []) + ($l | split(",") | map(select(. != ""))) | unique))')
  local families
  families=$(jq 'length' <<<"$SERIES")
  # Every family of a read with -F has a series (ibvcap_held_slots is the
  # verbs source's only).
  [ "$families" -ge 20 ] ||
    fail "the metrics file of ibvcap read has $families series names, expected 20 or more: $(head -c 600 "$M")"
  say "the binary wrote $families series names ($(grep -vc '^#' "$M") series) in $M"
}

# PROMQL (jq): the references of one PromQL expression, read the way
# Prometheus parses it, well enough for expressions that promtool accepts:
# string literals and Grafana's variables taken out first, then selectors
# NAME{LABEL op "..."}, the label lists of by/without/on/ignoring/group_left/
# group_right, range brackets, and what remains: names not followed by "("
# (functions) and not keywords. Input {where, expr, legend?}; output a list of
# {where, kind, name, label?}: kind metric (a series name, with the selector's
# labels), group (a label an aggregation, matching or legend names), error.
read -r -d '' PROMQL <<'JQ' || true
def refs:
  . as $in
  | ($in.expr
      # Grafana variable queries: label_values(QUERY, LABEL), label_values(LABEL),
      # query_result(QUERY).
      | if test("^\\s*label_values\\(\\s*[A-Za-z_][A-Za-z0-9_]*\\s*\\)\\s*$") then
          {q: "", g: [capture("label_values\\(\\s*(?<l>[A-Za-z_][A-Za-z0-9_]*)").l]}
        elif test("^\\s*label_values\\(") then
          (capture("^\\s*label_values\\((?<q>.*),\\s*(?<l>[A-Za-z_][A-Za-z0-9_]*)\\s*\\)\\s*$")
           // {q: null, l: null}) as $c
          | if $c.q == null then {q: "", g: [], e: "a label_values query that is not label_values(QUERY, LABEL)"}
            else {q: $c.q, g: [$c.l]} end
        elif test("^\\s*query_result\\(") then
          {q: (capture("^\\s*query_result\\((?<q>.*)\\)\\s*$").q), g: []}
        else {q: ., g: []} end) as $v
  | ($v.q
      | gsub("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`"; "\"\"")
      | gsub("\\$\\{[^}]*\\}|\\$[A-Za-z_][A-Za-z0-9_]*"; "1")) as $s
  | [$s | scan("([A-Za-z_:][A-Za-z0-9_:]*)?\\s*\\{([^}]*)\\}")
      | {name: .[0], labels: [.[1] | scan("([A-Za-z_][A-Za-z0-9_]*)\\s*(?:=~|!~|!=|=)") | .[0]]}] as $selectors
  | ($s | gsub("(?:[A-Za-z_:][A-Za-z0-9_:]*)?\\s*\\{[^}]*\\}"; " ")) as $s
  | "\\b(?:by|without|on|ignoring|group_left|group_right)\\s*\\(([^)]*)\\)" as $grouping
  | [$s | scan($grouping) | .[0] | split(",")[] | gsub("\\s"; "") | select(. != "")] as $groups
  | ($s | gsub($grouping; " ") | gsub("\\[[^\\]]*\\]"; " ")) as $s
  | ["and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
     "group_left", "group_right", "inf", "nan", "Inf", "NaN"] as $keywords
  | [$s | scan("(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*+(?!\\s*\\()")
      | select(. as $w | $keywords | index([$w]) | not)] as $bare
  | [($in.legend // "") | scan("\\{\\{\\s*([A-Za-z_][A-Za-z0-9_]*)\\s*\\}\\}") | .[0]] as $legend
  | [ ($selectors[] | if .name == null then {kind: "error", name: "a selector without a series name"}
                      else {kind: "metric", name: .name, labels: .labels} end),
      ($bare[] | {kind: "metric", name: ., labels: []}),
      (($groups + $legend + $v.g)[] | {kind: "group", name: .}),
      (select($v.e != null) | {kind: "error", name: $v.e}) ]
  | map(. + {where: $in.where});

# check($series; $allowed; $scrape; $require): problems, one line each.
def check($series; $allowed; $scrape; $require):
  ([$series[]] | add | unique) as $all_labels
  | .[] | refs[] |
  if .kind == "error" then "\(.where): \(.name)"
  elif .kind == "metric" then
    .name as $n
    | if ($allowed | index([$n])) then empty
    elif $series[$n] == null then
      "\(.where): names the series \($n), which ibvcap does not write"
    else
      .where as $w
      | (.labels[] | . as $l | select(($series[$n] + $scrape) | index([$l]) | not)
         | "\($w): matches the label \(.) on \($n), which has only \($series[$n] | join(", "))"),
        ($require[] as $r | select(.labels | index([$r]) | not)
         | "\($w): its selector of \($n) lacks \($r)=~\"$\($r)\" (the dashboard's variable)")
    end
  else
    .name as $l | select(($all_labels + $scrape) | index([$l]) | not)
    | "\(.where): uses the label \(.name), which no series ibvcap writes has"
  end;
JQ

# check_refs EXPRS_JSON ALLOWED_JSON REQUIRED_JSON: the problems of the
# expressions [{where, expr, legend?}], one line each (none: all known).
check_refs() {
  jq -r --argjson series "$SERIES" --argjson allowed "$2" --argjson require "$3" \
    --argjson scrape "$(printf '%s\n' "${SCRAPE_LABELS[@]}" | jq -R . | jq -s .)" \
    "$PROMQL check(\$series; \$allowed; \$scrape; \$require)" <<<"$1"
}

# names EXPRS_JSON: the distinct series names the expressions reference.
names() {
  jq -r "$PROMQL [.[] | refs[] | select(.kind == \"metric\") | .name] | unique | join(\" \")" <<<"$1"
}

# rules_exprs: the rules file's expressions as [{where, expr}], read from its
# YAML: "expr: ..." on one line, or "expr: |" / "expr: >" and the lines
# indented under it. where: "alert NAME" (or "record NAME").
rules_exprs() {
  awk '
    function flush() { if (collecting) { print where "\t" body; collecting = 0 } }
    {
      match($0, /^ */); indent = RLENGTH
      if (collecting && ($0 ~ /^[ \t]*$/ || indent > key_indent)) {
        line = $0; sub(/^ +/, "", line); body = body (body == "" ? "" : " ") line; next
      }
      flush()
    }
    /^ *- (alert|record): / { where = $2 " " $3; sub(/:/, "", where); next }
    /^ *expr: */ {
      key_indent = indent; rest = $0; sub(/^ *expr: */, "", rest)
      if (rest ~ /^[|>][-+]?$/) { collecting = 1; body = ""; next }
      if (rest ~ /^".*"$/ || rest ~ /^'\''.*'\''$/) rest = substr(rest, 2, length(rest) - 2)
      print where "\t" rest
    }
    END { flush() }' "$RULES" |
    jq -R -n '[inputs | split("\t") | {where: .[0], expr: .[1]}]'
}

mode_rules() {
  local out rc=0 problems exprs count
  out=$(promtool check rules "$RULES" 2>&1) || rc=$?
  [ "$rc" = 0 ] || fail "promtool check rules $RULES (exit $rc): $out"
  say "promtool check rules: $(grep -o 'SUCCESS.*' <<<"$out")"
  # Every alert: a severity label, a summary and a description.
  problems=$(awk '
    function done() { if (alert != "") for (k = 1; k <= 3; k++) if (!(need[k] in seen)) print "alert " alert ": no " need[k] }
    BEGIN { need[1] = "severity"; need[2] = "summary"; need[3] = "description" }
    /^ *- (alert|record): / { done(); delete seen; alert = ($2 == "alert:") ? $3 : "" ; next }
    /^ *(severity|summary|description): / { k = $1; sub(/:$/, "", k); seen[k] = 1 }
    END { done() }' "$RULES")
  [ -z "$problems" ] || fail "$RULES: $problems"
  metrics_file
  exprs=$(rules_exprs)
  count=$(jq 'length' <<<"$exprs")
  expect_eq "expressions read from $RULES = its rules (promtool's count)" "$count" \
    "$(grep -oE '[0-9]+ rules found' <<<"$out" | cut -d' ' -f1)"
  problems=$(check_refs "$exprs" "$(printf '%s\n' "${NODE_EXPORTER_SERIES[@]}" | jq -R . | jq -s .)" '[]')
  [ -z "$problems" ] || fail "$RULES uses series or labels the binary does not write:"$'\n'"$problems"
  say "the $count rules name only series the binary writes (and node_exporter's ${NODE_EXPORTER_SERIES[*]}): $(names "$exprs")"
}

mode_rules_test() {
  local out rc=0
  out=$(cd "$(dirname "$RULES_TEST")" && promtool test rules "$(basename "$RULES_TEST")" 2>&1) || rc=$?
  [ "$rc" = 0 ] || fail "promtool test rules $RULES_TEST (exit $rc):"$'\n'"$out"
  # Each alert of the rules file is tested, firing (a case with exp_labels)
  # and silent (a case with exp_alerts: []).
  local alert
  while read -r alert; do
    grep -qE "alertname: $alert(,|$)" "$RULES_TEST" || fail "$RULES_TEST has no test of $alert"
    grep -qE "alertname: $alert, exp_alerts: \[\]" "$RULES_TEST" ||
      fail "$RULES_TEST has no case where $alert stays silent"
    awk -v a="$alert" '$0 ~ "alertname: " a "$" { s = 1; next } s && /exp_labels:/ { f = 1; exit }
      s && /alertname:/ { s = 0 } END { exit !f }' "$RULES_TEST" ||
      fail "$RULES_TEST has no case where $alert fires"
  done < <(awk '/^ *- alert: / { print $3 }' "$RULES")
  say "promtool test rules: $(tr '\n' ' ' <<<"$out")"
}

mode_dashboard() {
  jq empty "$DASHBOARD" 2>"$WORK/jq.err" || fail "$DASHBOARD is not JSON: $(cat "$WORK/jq.err")"
  local problems exprs count
  # The panels, rows' collapsed panels included.
  problems=$(jq -r '
    [.panels[]?, .panels[]?.panels[]?] as $p
    | ([$p[] | select(.id == null) | "panel \"\(.title)\" has no id"]
       + [$p | group_by(.id)[] | select(length > 1)
          | "panel id \(.[0].id) is used by \(map("\"\(.title)\"") | join(" and "))"]
       + [$p[] | select(.type != "row") as $q
          | ($q.targets // []) as $t
          | (if $t == [] then "panel \($q.id) \"\($q.title)\" has no query" else empty end),
            (if ($q.datasource.uid // "") != "${datasource}" then
               "panel \($q.id) \"\($q.title)\": datasource \($q.datasource | tojson), not the variable ${datasource}" else empty end),
            ($t[] | select((.datasource.uid // "${datasource}") != "${datasource}")
             | "panel \($q.id) \"\($q.title)\" target \(.refId): datasource \(.datasource | tojson), not ${datasource}"),
            ($t[] | select((.expr // "") == "") | "panel \($q.id) \"\($q.title)\" target \(.refId // "?"): no expr")]
       + (if (.schemaVersion // 0) < 36 then ["schemaVersion \(.schemaVersion): Grafana 9 and later import 36 or more"] else [] end)
       + ([.templating.list[]? | select(.type == "datasource" and .query == "prometheus")] | if length == 1 then []
          else ["no datasource variable of type prometheus"] end)
       + (["instance", "run"] - [.templating.list[]? | select(.type == "query") | .name]
          | map("no query variable \(.)")))[]' "$DASHBOARD")
  [ -z "$problems" ] || fail "$DASHBOARD:"$'\n'"$problems"
  say "$DASHBOARD: JSON, $(jq '[.panels[], .panels[].panels[]?] | length' "$DASHBOARD") panels with unique ids, every query on \${datasource}"

  # The expressions: panels' targets, and the query variables.
  local panels vars
  panels=$(jq '[.panels[]?, .panels[]?.panels[]? | select(.type != "row") as $q
    | ($q.targets // [])[] | {where: "panel \($q.id) \"\($q.title)\" target \(.refId)", expr, legend: .legendFormat}]' "$DASHBOARD")
  vars=$(jq '[.templating.list[]? | select(.type == "query")
    | {where: "variable \(.name)", expr: (if (.query | type) == "object" then .query.query else .query end)}]' "$DASHBOARD")
  count=$(jq 'length' <<<"$panels")

  # They parse: promtool check rules on a rules file of them, each a recording
  # rule named after its panel, with Grafana's variables replaced: range
  # variables by 5m, others by 1 (in a string too: a regex "1" is one).
  local all
  all=$(jq --argjson vars "$vars" '. + ($vars | map(.expr |= (capture("^\\s*label_values\\((?<q>.*),[^,]*\\)\\s*$").q // ""))
    | map(select(.expr != "")))' <<<"$panels")
  jq -r 'def grafana: gsub("\\[\\$[^\\]]*\\]"; "[5m]") | gsub("\\$\\{[^}]*\\}|\\$[A-Za-z_][A-Za-z0-9_]*"; "1");
    "groups:", "  - name: dashboard", "    rules:",
    (to_entries[] | "      - record: dashboard_\(.key)", "        expr: \(.value.expr | grafana | tojson)")' \
    <<<"$all" >"$WORK/dashboard-rules.yml"
  local out rc=0 where
  out=$(promtool check rules "$WORK/dashboard-rules.yml" 2>&1) || rc=$?
  if [ "$rc" != 0 ]; then
    # promtool names the rule dashboard_N: N is the query's place in $all.
    where=$(grep -oE 'dashboard_[0-9]+' <<<"$out" | sort -u | while read -r r; do
      jq -r --argjson k "${r#dashboard_}" '"\(.[$k].where): \(.[$k].expr)"' <<<"$all"
    done)
    fail "a dashboard query does not parse (promtool check rules, exit $rc):"$'\n'"$where"$'\n'"$out"
  fi
  say "the $count panel queries and $(jq length <<<"$vars") variable queries parse (promtool)"

  metrics_file
  problems=$(check_refs "$panels" '[]' '["instance", "run"]')
  problems+=$(check_refs "$vars" '[]' '[]')
  [ -z "$problems" ] || fail "$DASHBOARD uses series or labels the binary does not write:"$'\n'"$problems"
  local used
  used=$(names "$(jq -s 'add' <<<"$panels $vars")")
  # A reader that found no names would pass everything: the dashboard uses most.
  [ "$(wc -w <<<"$used")" -ge 15 ] || fail "only $(wc -w <<<"$used") series names read from the dashboard: $used"
  say "the $count panel queries name only series the binary writes, each selector with \$instance and \$run: $used"
}

case $MODE in
  rules) mode_rules ;;
  rules_test) mode_rules_test ;;
  dashboard) mode_dashboard ;;
  *) fail "usage: $0 IBVCAP_BINARY SOURCE_DIR rules|rules_test|dashboard (got '$MODE')" ;;
esac
pass
