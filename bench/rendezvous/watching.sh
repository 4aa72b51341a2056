#!/usr/bin/env bash
# The cost of watching ddprun-rdzv: the same rendezvous load with its HTTP side off, and on and
# scraped every second (/metrics, as Prometheus would), alternated REPS times (the first of each
# pair alternating too); prints the median of each figure side by side. Usage: bench/rendezvous/watching.sh [build dir] [reps]
#   round completion, 8 agents:   all 8 assigned after the first join
#   10,000 agents:                all assigned; server CPU while they heartbeat; failure to restart
set -euo pipefail
build=${1:-build}
reps=${2:-5}
load="$build/bin/rdzv-load"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'; }

for i in $(seq "$reps"); do
  # Which goes first alternates, so that an order effect does not pass for a cost.
  order=$([ $((i % 2)) = 1 ] && echo "off on" || echo "on off")
  for mode in $order; do
    flag=$([ "$mode" = on ] && echo --scrape-http || true)
    "$load" --agents 8 --channels 8 --heartbeat-seconds 0 $flag >> "$out/8-$mode.txt"
    "$load" --agents 10000 --channels 16 --heartbeat-seconds 5 --keep-alive 1 $flag \
      >> "$out/10000-$mode.txt"
  done
done

# "all assigned X s after the first join", "server CPU Y% of one core", "reassigned in Z s".
assigned() { sed -n 's/.*all assigned \([0-9.]*\) s after the first join.*/\1/p' "$1"; }
cpu() { sed -n 's/.*server CPU \([0-9.]*\)% of one core.*/\1/p' "$1"; }
restart() { sed -n 's/.*restarted and reassigned in \([0-9.]*\) s.*/\1/p' "$1"; }
scrapes() { sed -n 's/^http: \([0-9]*\) scrapes.*median \([0-9.]*\) ms.*/\1 \2/p' "$1"; }

printf '%-46s %12s %12s\n' "median of $reps runs" "http off" "scraped 1/s"
printf '%-46s %12s %12s\n' "8 agents: round complete (s)" \
  "$(assigned "$out/8-off.txt" | median)" "$(assigned "$out/8-on.txt" | median)"
printf '%-46s %12s %12s\n' "10,000 agents: round complete (s)" \
  "$(assigned "$out/10000-off.txt" | median)" "$(assigned "$out/10000-on.txt" | median)"
printf '%-46s %12s %12s\n' "10,000 agents: server CPU, heartbeats (% core)" \
  "$(cpu "$out/10000-off.txt" | median)" "$(cpu "$out/10000-on.txt" | median)"
printf '%-46s %12s %12s\n' "10,000 agents: failure -> all restarted (s)" \
  "$(restart "$out/10000-off.txt" | median)" "$(restart "$out/10000-on.txt" | median)"
printf '%-46s %12s %12s\n' "10,000 agents: /metrics scrape (ms)" "-" \
  "$(scrapes "$out/10000-on.txt" | awk '{ print $2 }' | median)"
echo "scrapes per 10,000-agent run: $(scrapes "$out/10000-on.txt" | awk '{ print $1 }' | tr '\n' ' ')"
