#!/bin/sh
# A stand-in for a user's benchmark, for `backend: command` (docs/command-backend.md).
#
#   sh busy.sh LOOP_SIZE [REPEATS]
#
# Spins a shell loop of LOOP_SIZE iterations REPEATS times (default 1) and prints one
# JSON-lines record per repetition with its wall time:
#   {"sparsegate": 1, "metric": "latency", "unit": "ns", "value": 1234567}
# Other output (the first line) is chatter that sparsegate ignores. POSIX sh; the clock
# is `date +%s%N` (GNU coreutils or busybox).
n=${1:-}
reps=${2:-1}
case $n in
'' | *[!0-9]*) echo "busy.sh: LOOP_SIZE must be a whole number, got '$n'" >&2; exit 2 ;;
esac
case $reps in
'' | *[!0-9]*) echo "busy.sh: REPEATS must be a whole number, got '$reps'" >&2; exit 2 ;;
esac
echo "busy.sh: $n iterations x $reps"
r=0
while [ "$r" -lt "$reps" ]; do
	t0=$(date +%s%N)
	i=0
	while [ "$i" -lt "$n" ]; do i=$((i + 1)); done
	t1=$(date +%s%N)
	echo "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"ns\", \"value\": $((t1 - t0))}"
	r=$((r + 1))
done
