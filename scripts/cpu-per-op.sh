#!/bin/bash
# Where the guest's CPU goes per I/O, for the kernel's NFS/RDMA mount and
# nfsrdma-mount on the same fio jobs, in one guest boot: every task's exact
# run time over the job (/proc/PID/task/*/schedstat), summed by task name
# (the mount server's threads as MOUNT, per-CPU kernel threads apart), per
# I/O, beside the whole guest's. Run in the guest:
#
#   _build/testbed run -timeout 15m -- bash scripts/cpu-per-op.sh \
#       'rr4k-qd1:--rw=randread --bs=4k --iodepth=1'
#
# Each argument is NAME:FIO-ARGS (libaio, direct I/O on a 64 MiB file, RT
# seconds each, default 10). M is the nfsrdma-mount binary under /share
# (default _build/nfsrdma-mount). Tasks under 50 ms in a job are left out,
# and so are tasks that end before the job does (fio's own): ALL, the
# guest's whole run time (/proc/schedstat), still counts them.
set -u
cd /share || exit 1
M=${M:-_build/nfsrdma-mount}
E=${TESTBED_INSECURE_EXPORT:-/export-insecure}
SERVER=${TESTBED_SERVER:-10.99.0.1}
[ $# -gt 0 ] || { echo "usage: cpu-per-op.sh NAME:FIO-ARGS..." >&2; exit 2; }
modprobe fuse 2>/dev/null
mkdir -p /mnt/cpo-ours /mnt/cpo-kernel
head -c 64M /dev/urandom > "$E/cpo-f64" && chmod 644 "$E/cpo-f64" && sync
tmp=$(mktemp -d)
cleanup() {
	"./$M" -u /mnt/cpo-ours 2>/dev/null
	umount /mnt/cpo-kernel 2>/dev/null
	rm -rf "$E/cpo-f64" "$tmp"
}
trap cleanup EXIT
"./$M" -o proto=rdma,vers=3 "$SERVER:$E" /mnt/cpo-ours 2>/dev/null || { echo "nfsrdma-mount failed" >&2; exit 1; }
mount -t nfs -o vers=3,proto=rdma,port=20049 "$SERVER:$E" /mnt/cpo-kernel || exit 1
pid=$(pgrep -f "nfsrdma-mount.* /mnt/cpo-ours\$" | head -1)
snap() { # "tid name run_ns" per task, then the guest's total
	awk -v pid="$pid" 'FNR == 1 { split(FILENAME, f, "/"); tid = f[5]; p = f[3] }
		FILENAME ~ /schedstat$/ { run[tid] = $1; next }
		{ c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*/, "", c); gsub(/ /, "_", c)
		  if (p == pid) c = "MOUNT"; name[tid] = c }
		END { for (t in name) print t, name[t], run[t] + 0 }' /proc/[0-9]*/task/*/schedstat /proc/[0-9]*/task/*/stat 2>/dev/null | sort
	awk '/^cpu[0-9]/ { r += $8 } END { print "ALL ALL", r }' /proc/schedstat
}
for j in "$@"; do
	for side in kernel ours; do
		snap > "$tmp/s0"
		ios=$(fio --name=cpo --filename="/mnt/cpo-$side/cpo-f64" --direct=1 --ioengine=libaio --runtime="${RT:-10}" --time_based \
			--output-format=terse --terse-version=3 ${j#*:} | awk -F';' '{print $8 * $9 / 1000 + $49 * $50 / 1000}')
		snap > "$tmp/s1"
		echo "== ${j%%:*} $side: $ios I/Os"
		join "$tmp/s0" "$tmp/s1" | awk -v n="$ios" '{ d = ($5 - $3) / 1e6; run[$2] += d }
			END { for (c in run) if (run[c] > 50) printf "  %-28s %8.0f ms  %7.3f ms per I/O\n", c, run[c], run[c] / n }' | sort -k2 -nr
	done
done
