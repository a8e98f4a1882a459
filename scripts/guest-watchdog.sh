#!/bin/sh
# guest-watchdog.sh: run in the guest beside a test to see where the kernel
# holds a task. Every 15 s it lists the tasks in uninterruptible sleep (D);
# a task seen in D at two scans in a row has its kernel stack written to the
# log (every thread is a task: a process stuck as a whole shows all of
# them). It needs
# nothing of the test process, so it still reports when that process is
# the one stuck. Usage, from the repository on the host:
#
#   ./_build/testbed run -- sh -c 'sh scripts/guest-watchdog.sh _build/watchdog.log & exec ./_build/integration.test ...'
out=${1:-/share/_build/watchdog.log}
: >"$out"
prev=""
while :; do
	sleep 15
	# One awk over every task's stat: the state is the field after the
	# parenthesised command name.
	now=$(awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); if (f[1] == "D") { sub(/\/stat$/, "", FILENAME); print FILENAME } }' /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null)
	for t in $now; do
		case " $(echo $prev) " in *" $t "*) ;; *) continue ;; esac
		{
			echo "=== $(date -u +%T) blocked: $t ($(cat "$t/comm" 2>/dev/null)), wchan $(cat "$t/wchan" 2>/dev/null)"
			cat "$t/stack" 2>/dev/null
		} >>"$out"
	done
	prev=$now
done
