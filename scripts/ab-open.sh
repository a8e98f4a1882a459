#!/bin/bash
# A/B of two nfsrdma-mount binaries on opening many files cold, as root on
# the bed's no_root_squash export: cp -a of a source-like tree made at the
# server (N files of 1-64 KiB in nested directories, root's, 0644) out of
# the mount, checked with diff -r, and cat of every file of the tree by
# its path (one process: a LOOKUP, then an open and a read of each file).
# Each step on a fresh mount with the guest's caches dropped. As
# scripts/ab-mount.sh: both binaries and the kernel's mount in one boot,
# alternating order by round; the median of the rounds' B/A ratios of
# files per second (above 1: B is faster) and of the mount servers' CPU
# time per file (from /proc/PID/task/*/schedstat), then each mount
# server's RPCs.
#
#   _build/testbed run -timeout 30m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-open.sh
#
# N files (default 300), ROUNDS rounds (default 6).
AB_FILES=""
. /share/scripts/ab-mounts.sh
ab_mount
N=${N:-300}
tree=$E/ab-open
trap 'ab_cleanup; rm -rf "$tree" /tmp/ab-open-*' EXIT
rm -rf "$tree"
ab_tree "$tree"
(cd "$tree" && find t -type f | sort) > /tmp/ab-open-list
t() { local s; s=$(date +%s%N); "$@"; echo $((($(date +%s%N) - s) / 1000)); }
# fresh SIDE: the side's mount made again, the guest's caches dropped.
fresh() {
	case $1 in
	kernel)
		umount /mnt/ab-kernel && mount -t nfs -o vers=3,proto=rdma,port=20049 "$SERVER:$E" /mnt/ab-kernel || exit 1 ;;
	*)
		local bin
		bin=$(eval echo \$$1)
		"./$bin" -u "/mnt/ab-$1" && "./$bin" -o proto=rdma,vers=3 "$SERVER:$E" "/mnt/ab-$1" 2>/dev/null || exit 1 ;;
	esac
	sync
	echo 3 >/proc/sys/vm/drop_caches
}
# cpu SIDE: the CPU time, in microseconds, that SIDE's mount server has
# used so far (all its threads; 0 for the kernel's mount).
cpu() {
	[ "$1" = kernel ] && { echo 0; return; }
	local pid
	pid=$(pgrep -f "nfsrdma-mount.* /mnt/ab-$1\$" | head -1)
	cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s / 1000}'
}
catlist() { (cd "/mnt/ab-$1/ab-open" && xargs -a /tmp/ab-open-list cat) >/dev/null; }
for round in $(seq 1 "${ROUNDS:-6}"); do
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for side in $order; do
		fresh "$side"
		o=/tmp/ab-open-out
		c0=$(cpu "$side")
		us=$(t cp -a "/mnt/ab-$side/ab-open/t" "$o")
		c1=$(cpu "$side")
		echo "r$round $side cp-a-out $((us / N)) $(((c1 - c0) / N))"
		diff -r "$tree/t" "$o" >/dev/null || echo "r$round $side: the copy differs" >&2
		rm -rf "$o"
		fresh "$side"
		c0=$(cpu "$side")
		us=$(t catlist "$side")
		c1=$(cpu "$side")
		echo "r$round $side cat-by-path $((us / N)) $(((c1 - c0) / N))"
	done
done | tee "$out"
echo "us per file above (then the mount server's CPU us per file); B/A of files per second:"
awk '{print $1, $2, $3, 1e6/$4}' "$out" | awk -f scripts/ab-summary.awk
echo "B/A of files per second of the mount server's CPU:"
awk '$2 != "kernel" && $5 > 0 {print $1, $2, $3 "-cpu", 1e6/$5}' "$out" | awk -f scripts/ab-summary.awk
echo "RPCs of the last round's mounts:"
ab_stats "^\s+(LOOKUP|GETATTR|ACCESS|READ|READDIRPLUS):"
