#!/usr/bin/env bash
# Where the guest's CPUs go while one command runs: the kernel's scheduler
# events (ftrace sched_switch) summed per task name, with each name's
# context switches. For the test bed's guest, where perf is not installed:
#
#   ./_build/testbed run -- bash scripts/sched-trace.sh [-n OPS] [-t NAME] [-s] CMD [ARGS...]
#
# It prints, for the command's run only (between two trace markers): the
# window, each task name's CPU time and share of the guest's CPUs, its
# switches out, and how long it waited runnable for a CPU (from its wake-up,
# or its preemption, to its next switch in); with -n OPS, per operation
# too. The wait shows who queues behind whom: on two CPUs, a mount server
# that stays on a CPU after posting a call keeps the server's nfsd, woken
# onto that CPU, from starting on it. Go programs' threads all
# carry the program's name; -t splits a name into its threads (TIDs), which
# shows the Go runtime's own threads (sysmon's 20 us polls, idle Ms woken
# to look for work) beside the ones doing the work. -s adds the system
# calls (raw_syscalls events): per task (and thread, with -t) and call, how
# many and how long from entry to exit (sleeps included), per operation
# with -n; the tracing slows every call, so take its times as relative.
#
# Needs root and a kernel with ftrace (the bed's Debian kernel has it).
set -euo pipefail

ops=0
threads=""
sys=0
while [ $# -gt 0 ]; do
	case $1 in
	-n) ops=$2; shift 2 ;;
	-t) threads=$2; shift 2 ;;
	-s) sys=1; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-n OPS] [-t NAME] [-s] CMD [ARGS...]" >&2; exit 2; }

T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
[ -e $T/events/sched/sched_switch/enable ] || { echo "sched-trace: no ftrace sched events in this kernel" >&2; exit 1; }
out=$(mktemp)
trap 'echo 0 > $T/tracing_on; echo 0 > $T/events/sched/sched_switch/enable; echo 0 > $T/events/sched/sched_wakeup/enable; echo 0 > $T/events/raw_syscalls/enable 2>/dev/null; rm -f "$out"' EXIT

echo 0 > $T/tracing_on
echo > $T/trace
echo 32768 > $T/buffer_size_kb
echo 1 > $T/events/sched/sched_switch/enable
echo 1 > $T/events/sched/sched_wakeup/enable
if [ $sys = 1 ]; then
	[ -e $T/events/raw_syscalls/enable ] || { echo "sched-trace: no raw_syscalls events in this kernel" >&2; exit 1; }
	echo 1 > $T/events/raw_syscalls/enable
fi
echo 1 > $T/tracing_on
echo "sched-trace begin" > $T/trace_marker
status=0
"$@" || status=$?
echo "sched-trace end" > $T/trace_marker
echo 0 > $T/tracing_on
cat $T/trace > "$out"

awk -v ops="$ops" -v split_name="$threads" '
function key(comm, pid) {
	if (pid == "0") return "idle"
	if (split_name != "" && comm == split_name) return comm "/" pid
	return comm
}
function ts(line) { match(line, / [0-9]+\.[0-9]+: /); return substr(line, RSTART + 1, RLENGTH - 3) + 0 }
/tracing_mark_write: sched-trace begin/ { on = 1; next }
/tracing_mark_write: sched-trace end/ { on = 0; next }
on && /sched_switch:/ {
	match($0, /\[[0-9]+\]/); cpu = substr($0, RSTART + 1, RLENGTH - 2) + 0
	t = ts($0)
	if (first == "") first = t
	last = t
	match($0, /prev_comm=.* prev_pid=/); pc = substr($0, RSTART + 10, RLENGTH - 20)
	match($0, /prev_pid=[0-9]+/); pp = substr($0, RSTART + 9, RLENGTH - 9)
	match($0, /next_comm=.* next_pid=/); nc = substr($0, RSTART + 10, RLENGTH - 20)
	match($0, /next_pid=[0-9]+/); np = substr($0, RSTART + 9, RLENGTH - 9)
	pk = key(pc, pp)
	if (cpu in cur) cpu_t[cur[cpu]] += t - since[cpu]
	out_n[pk]++
	since[cpu] = t; cur[cpu] = key(nc, np)
	# Runnable time: from a wake-up or a preemption (prev_state R) to the
	# next switch in.
	if (np in ready) { wait_t[cur[cpu]] += t - ready[np]; delete ready[np] }
	match($0, /prev_state=[^ ]+/)
	if (pp != "0" && substr($0, RSTART + 11, 1) == "R") ready[pp] = t
	else delete ready[pp]
}
on && /sched_wakeup:/ {
	t = ts($0)
	match($0, / pid=[0-9]+/); p = substr($0, RSTART + 5, RLENGTH - 5)
	if (!(p in ready)) ready[p] = t
}
END {
	if (first == "") { print "1e18\tsched-trace: no scheduler events in the window"; exit }
	n = 0; for (c in cur) n++
	w = last - first
	if (w <= 0) w = 1e-9
	printf "1e18\twindow %.3f s on %d CPUs (%.3f CPU-s)%s\n", w, n, w * n, (ops > 0 ? sprintf("; %d operations: %.0f us each", ops, w * 1e6 / ops) : "")
	printf "1e17\t%-28s %10s %6s %9s %10s%s\n", "task", "CPU ms", "share", "switches", "waited ms", (ops > 0 ? "   per op: CPU us  switches  waited us" : "")
	for (k in cpu_t) {
		printf "%.9f\t%-28s %10.1f %5.1f%% %9d %10.1f", cpu_t[k], k, cpu_t[k] * 1000, 100 * cpu_t[k] / (w * n), out_n[k], wait_t[k] * 1000
		if (ops > 0) printf "   %15.0f %9.1f %10.0f", cpu_t[k] * 1e6 / ops, out_n[k] / ops, wait_t[k] * 1e6 / ops
		printf "\n"
	}
}' "$out" | sort -t "$(printf '\t')" -k1,1 -g -r | cut -f2- | head -24

[ $sys = 1 ] || exit $status
echo
awk -v ops="$ops" -v split_name="$threads" '
BEGIN {
	n = split("0 read 1 write 3 close 7 poll 9 mmap 11 munmap 15 rt_sigreturn 16 ioctl 17 pread64 18 pwrite64 19 readv 20 writev 24 sched_yield 28 madvise 35 nanosleep 39 getpid 82 rename 83 mkdir 84 rmdir 87 unlink 202 futex 230 clock_nanosleep 232 epoll_wait 234 tgkill 257 openat 258 mkdirat 262 newfstatat 263 unlinkat 270 pselect6 271 ppoll 281 epoll_pwait 295 preadv 296 pwritev 316 renameat2", a, " ")
	for (i = 1; i < n; i += 2) name[a[i]] = a[i + 1]
}
function key(comm, pid) {
	if (split_name != "" && comm == split_name) return comm "/" pid
	return comm
}
function ts(line) { match(line, / [0-9]+\.[0-9]+: /); return substr(line, RSTART + 1, RLENGTH - 3) + 0 }
/tracing_mark_write: sched-trace begin/ { on = 1; next }
/tracing_mark_write: sched-trace end/ { on = 0; next }
on && / sys_(enter|exit): NR / {
	match($0, /-[0-9]+ +\[/); pid = substr($0, RSTART + 1, RLENGTH - 1); sub(/ +\[$/, "", pid)
	match($0, /^ *.*-[0-9]+ +\[/); comm = substr($0, RSTART, RLENGTH); sub(/^ +/, "", comm); sub(/-[0-9]+ +\[$/, "", comm)
	match($0, /NR -?[0-9]+/); nr = substr($0, RSTART + 3, RLENGTH - 3)
	if ($0 ~ / sys_enter: /) { in_t[pid] = ts($0); in_nr[pid] = nr; in_k[pid] = key(comm, pid); next }
	if ((pid in in_t) && in_nr[pid] == nr) {
		k = in_k[pid] "\t" (nr in name ? name[nr] : "NR " nr)
		calls[k]++; dur[k] += ts($0) - in_t[pid]
		delete in_t[pid]
	}
}
END {
	d = (ops > 0 ? ops : 1)
	printf "1e18\t%-28s %-16s %12s %14s\n", "task", "system call", (ops > 0 ? "calls/op" : "calls"), (ops > 0 ? "us in it/op" : "ms in it")
	for (k in calls) {
		split(k, f, "\t")
		printf "%.9f\t%-28s %-16s %12.2f %14.0f\n", dur[k], f[1], f[2], calls[k] / d, (ops > 0 ? dur[k] * 1e6 / ops : dur[k] * 1e3)
	}
}' "$out" | sort -t "$(printf '\t')" -k1,1 -g -r | cut -f2- | head -30
exit $status
