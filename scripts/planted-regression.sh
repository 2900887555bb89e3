#!/bin/sh
# Planted-regression harness for paired baseline runs (issue 22).
#
#   scripts/planted-regression.sh [SPARSEGATE] [GATES]
#
# A `backend: command` slice runs scripts/planted/work.c (a compiled loop whose work
# SLOWDOWN_PCT makes a few percent larger), its comparator the same program at a fixed
# size, and guards `latency regress_at_most: 5%`. With one core kept busy (`yes`), it
# gates GATES times (default 20) per configuration:
#   paired   — the pack names `baseline: work LOOP 0`, interleaved in the same session;
#   golden   — no baseline build: against a golden baseline blessed once at the start;
# for an unchanged candidate (A/A), +3% (inside the margin: must never fail) and +10%
# (must be caught). Prints pass/inconclusive/fail counts and the mean wall time per gate.
# The golden baseline is blessed before the busy process starts (a quiet session), the
# gates run beside it (a busy one); PLANTED_BLESS_BUSY=1 blesses beside it too.
# PLANTED_PAIRS (default 6) sets the pairs per run (5 runs), PLANTED_MODES (default
# "paired golden") the yardsticks, PLANTED_CHANGES (default "0 3 10") the slowdowns in
# percent, PLANTED_LOOP the loop size. A gate that exits otherwise than 0, 1 or 3 is
# counted under "error" and its stderr printed (the first of each row), the set goes on.
# PLANTED_BUSY (default 1) sets how many busy processes run beside the gates: 1 is the
# issue's "one other busy process"; 4 stands in for a runner shared with other jobs (a
# load average of about 5 on 2 cores).
# PLANTED_KEEP=DIR (absolute) keeps each gate's verdict.json and evidence.json there (as
# MODE-+PCT-N.verdict.json, …), to read the intervals the gates produced.
# Needs a C compiler (cc). Takes about 4 minutes with the defaults on a quiet machine.
# Measured (paired, 20 gates each, 2-core AMD EPYC): with PLANTED_BUSY=1, A/A 20 pass,
# +3% 20 pass, +10% 20 fail (1.9 s a gate); with PLANTED_BUSY=4 (load average 5), A/A 20
# pass, +3% 16 pass and 4 inconclusive, +10% 20 fail (3.7 s a gate), since the pairs read
# each side's fastest repetition (docs/command-backend.md).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/sparsegate}
gates=${2:-20}
loop=${PLANTED_LOOP:-1500000}
pairs=${PLANTED_PAIRS:-6}
modes=${PLANTED_MODES:-paired golden}
changes=${PLANTED_CHANGES:-0 3 10}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d)
nbusy=${PLANTED_BUSY:-1}
busy=""
trap 'if [ -n "$busy" ]; then kill $busy 2>/dev/null; fi; rm -rf "$work"' EXIT INT TERM
# Start the busy processes (their ids in $busy).
start_busy() {
	n=0
	while [ "$n" -lt "$nbusy" ]; do
		yes >/dev/null &
		busy="$busy $!"
		n=$((n + 1))
	done
}
cc -O2 -o "$work/work" "$here/planted/work.c"

# pack NAME SLOWDOWN_PCT PAIRED(yes|no)
pack() {
	baseline=""
	if [ "$3" = yes ]; then
		baseline="      baseline: {argv: [./work, \"$loop\", \"0\"]}"
	fi
	cat >"$work/$1.yaml" <<PACK
schema_version: 1
name: planted
owners: [{name: Harness, email: h@example.com, role: owner}]
rollback: {trigger: latency regressed}
samples: {warmup: 1, min: $pairs, max: $pairs, time_budget_s: 0.01, runs: 5}
slices:
  - id: work
    backend: command
    command:
      argv: [./work, "$loop", "$2"]
      comparator: {argv: [./work, "$((loop * 2))", "0"]}
$baseline
    guardrails:
      - {metric: latency, regress_at_most: 5%}
PACK
}

cd "$work"
# The golden baseline, blessed once "in an earlier session": on a quiet machine (set
# PLANTED_BLESS_BUSY=1 to bless with the core already busy, as the gates run).
if [ "${PLANTED_BLESS_BUSY:-0}" = 1 ]; then start_busy; fi
pack bless 0 no
"$bin" bless bless.yaml --golden golden >/dev/null 2>&1
if [ -z "$busy" ]; then start_busy; fi
printf '%-8s %-6s %5s %13s %5s %6s %9s\n' yardstick change pass inconclusive fail error s/gate
for mode in $modes; do
	for pct in $changes; do
		paired=no
		[ "$mode" = paired ] && paired=yes
		pack "g$pct$mode" "$pct" "$paired"
		pass=0 inc=0 fail=0 err=0
		start=$(date +%s%N)
		i=0
		while [ "$i" -lt "$gates" ]; do
			rc=0
			"$bin" gate "g$pct$mode.yaml" --golden golden --out out --no-history --quiet >/dev/null 2>gate.err || rc=$?
			if [ -n "${PLANTED_KEEP:-}" ] && [ -d out ]; then
				mkdir -p "$PLANTED_KEEP"
				for f in verdict evidence; do
					if [ -f "out/$f.json" ]; then cp "out/$f.json" "$PLANTED_KEEP/$mode-+$pct-$((i + 1)).$f.json"; fi
				done
			fi
			case $rc in
			0) pass=$((pass + 1)) ;;
			1) fail=$((fail + 1)) ;;
			3) inc=$((inc + 1)) ;;
			*)
				err=$((err + 1))
				[ "$err" -gt 1 ] || { echo "$mode +$pct%, gate $((i + 1)) exited $rc:" >&2 && cat gate.err >&2; }
				;;
			esac
			i=$((i + 1))
		done
		end=$(date +%s%N)
		printf '%-8s %-6s %5d %13d %5d %6d %9.2f\n' "$mode" "+$pct%" "$pass" "$inc" "$fail" "$err" \
			"$(echo "($end - $start) / 1000000000 / $gates" | bc -l)"
	done
done
# What the counts were measured on: the load at the end of the set (busy processes still
# running) and the CPU.
echo "busy processes: $nbusy; $(uptime | sed 's/.*load average/load average/')"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
