#!/bin/bash
# A/B of two nfsrdma-mount binaries on buffered sequential writes, in one
# guest boot (see ab-mount.sh for why A and B are mounted together and
# measured in alternating rounds): dd writes MIB MiB (default 128) in 1 MiB
# write(2) calls and fsyncs, with vm.dirty_bytes lowered to DIRTY MiB
# (default 32) so that the kernel's writeback runs during the write, as it
# does for a file larger than the dirty limit. The kernel's mount runs each
# round too, for reference.
#
#   _build/testbed run -timeout 20m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-bufwrite.sh
#
# Prints MiB/s per client and round, each mount server's peak resident
# memory (VmHWM), then the median of the rounds' B/A and B/kernel ratios.
MIB=${MIB:-128}
AB_FILES="ab-bw-kernel ab-bw-A ab-bw-B"
. /share/scripts/ab-mounts.sh
echo $((${DIRTY:-32} << 20)) > /proc/sys/vm/dirty_bytes
echo $((${DIRTY:-32} << 19)) > /proc/sys/vm/dirty_background_bytes
ab_mount
run() { # round side
	local f=/mnt/ab-$2/ab-bw-$2
	local t0 t1
	t0=$(date +%s.%N)
	dd if=/dev/zero of="$f" bs=1M count="$MIB" conv=fsync status=none || return
	t1=$(date +%s.%N)
	rm -f "$f"
	awk -v r="$1" -v s="$2" -v m="$MIB" -v a="$t0" -v b="$t1" 'BEGIN {printf "r%-3s %-6s MiB/s %8.2f\n", r, s, m / (b - a)}'
}
for round in $(seq 1 "${ROUNDS:-6}"); do
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for side in $order; do run "$round" "$side"; done
done | tee "$out"
for side in A B; do
	pid=$pidA
	[ $side = B ] && pid=$pidB
	[ -n "$pid" ] && echo "$side: mount server peak RSS $(awk '/VmHWM/ {print $2 / 1024 " MiB"}' /proc/"$pid"/status)"
done
awk -v n="buffered-write-${MIB}MiB" '{print $1, $2, n, $4}' "$out" | awk -f scripts/ab-summary.awk
