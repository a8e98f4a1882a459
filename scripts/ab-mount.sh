#!/bin/bash
# A/B of two nfsrdma-mount binaries in one guest boot, for a developer
# judging a change: single runs on the TCG bed swing by 30 % between
# rounds (the host's load moves the guest's speed), so both binaries are
# mounted at once, on the same export and file, and every job runs on one
# right after the other, many times, in alternating order; what counts is
# the median of the rounds' own B/A ratios. The kernel's mount runs each
# job too, for reference.
#
#   _build/testbed run -timeout 20m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-mount.sh 'rr4k-qd16:--rw=randread --bs=4k --ioengine=libaio --iodepth=16'
#
# Each argument is one fio job, NAME:FIO-ARGS (direct I/O on a 64 MiB file,
# RT seconds each, default 3); ROUNDS rounds (default 8). A and B are paths
# under /share (the host's current directory). Prints one line per job,
# client and round (MiB/s read, read IOPS, write IOPS, and for A and B the
# mount server's CPU per I/O, exact from /proc/PID/task/*/schedstat), then
# per job the median of the rounds' B/A ratios of read+write IOPS (above
# 1: B is faster), their range and how many rounds B won, and the same of
# the CPU per I/O (above 1: B spends less): a change that saves CPU shows
# there with less noise than in the IOPS. Know the noise before
# trusting a ratio: two copies of one binary measured 0.83 and 0.89 (rounds
# 0.75-1.11) in 4 rounds on the bed, so run 8 or more and count a change
# only when B wins nearly every round.
[ $# -gt 0 ] || { echo "usage: ab-mount.sh NAME:FIO-ARGS..." >&2; exit 2; }
AB_FILES=ab-f64
. /share/scripts/ab-mounts.sh
head -c 64M /dev/urandom > "$E/ab-f64" && chmod 644 "$E/ab-f64" && sync
ab_mount
[ -n "$pidA" ] && [ -n "$pidB" ] || echo "ab-mount.sh: mount server not found (A pid '$pidA', B pid '$pidB'): no CPU per I/O" >&2
cpu() { # a mount server's run time so far, ns (every thread: schedstat); 0 for the kernel
	case $1 in
	A) cat /proc/"$pidA"/task/*/schedstat ;;
	B) cat /proc/"$pidB"/task/*/schedstat ;;
	*) echo 0 ;;
	esac 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}
job() { # dir round side name fio-args
	local c0 c1 res
	c0=$(cpu "$3")
	res=$(fio --name=ab --filename="$1/ab-f64" --direct=1 --runtime="${RT:-3}" --time_based \
		--output-format=terse --terse-version=3 $5)
	c1=$(cpu "$3")
	echo "$res" | awk -F';' -v r="$2" -v s="$3" -v n="$4" -v c0="$c0" -v c1="$c1" '{
		ios = $8 * $9 / 1000 + $49 * $50 / 1000
		printf "r%-3s %-6s %-24s read MiB/s %8.2f  read IOPS %8.1f  write IOPS %8.1f  mount CPU us/IO %7.1f\n", r, s, n, $7/1024, $8, $49, (ios > 0 ? (c1 - c0) / 1000 / ios : 0)}'
}
for j in "$@"; do # warm each mount's caches of the file
	for side in kernel A B; do job "/mnt/ab-$side" 0 "$side" "${j%%:*}" "${j#*:}" >/dev/null; done
done
for round in $(seq 1 "${ROUNDS:-8}"); do
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for j in "$@"; do
		for side in $order; do job "/mnt/ab-$side" "$round" "$side" "${j%%:*}" "${j#*:}"; done
	done
done | tee "$out"
awk '{print $1, $2, $3, $9 + $12}' "$out" | awk -f scripts/ab-summary.awk
echo "the mount servers' CPU per I/O (B/A above 1: B spends less):"
awk '$2 != "kernel" && $16 > 0 {print $1, $2, $3, 1 / $16}' "$out" | awk -f scripts/ab-summary.awk | sed 's/; B\/kernel.*//'
