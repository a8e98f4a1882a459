#!/bin/bash
# A/B of two nfsrdma-mount binaries in one guest boot, for a developer
# judging a change: single runs on the TCG bed swing by 30 % between
# rounds, so both binaries (and the kernel's mount, for reference) are
# measured in turn, round after round, on the same export and file.
#
#   _build/testbed run -timeout 15m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-mount.sh 'rr4k-qd16:--rw=randread --bs=4k --ioengine=libaio --iodepth=16'
#
# Each argument is one fio job, NAME:FIO-ARGS (direct I/O on a 64 MiB file,
# RT seconds each, default 5); ROUNDS rounds (default 3). A and B are paths
# under /share (the host's current directory). Prints one line per job,
# client and round: MiB/s read, read IOPS, write IOPS.
set -u
cd /share || exit 1
A=${A:?A=path of the first nfsrdma-mount binary}
B=${B:?B=path of the second nfsrdma-mount binary}
[ $# -gt 0 ] || { echo "usage: ab-mount.sh NAME:FIO-ARGS..." >&2; exit 2; }
E=${TESTBED_INSECURE_EXPORT:-/export-insecure}
SERVER=${TESTBED_SERVER:-10.99.0.1}
modprobe fuse 2>/dev/null
mkdir -p /mnt/ab-kernel /mnt/ab-mount
head -c 64M /dev/urandom > "$E/ab-f64" && chmod 644 "$E/ab-f64" && sync
job() { # dir label fio-args
	fio --name=ab --filename="$1/ab-f64" --direct=1 --runtime="${RT:-5}" --time_based \
		--output-format=terse --terse-version=3 $3 |
		awk -F';' -v l="$2" '{printf "%-32s read MiB/s %8.2f  read IOPS %8.1f  write IOPS %8.1f\n", l, $7/1024, $8, $49}'
}
for round in $(seq 1 "${ROUNDS:-3}"); do
	mount -t nfs -o vers=3,proto=rdma,port=20049 "$SERVER:$E" /mnt/ab-kernel || exit 1
	for j in "$@"; do job /mnt/ab-kernel "r$round kernel ${j%%:*}" "${j#*:}"; done
	umount /mnt/ab-kernel
	for side in A B; do
		bin=${!side}
		"./$bin" -o proto=rdma,vers=3 "$SERVER:$E" /mnt/ab-mount 2>/dev/null || { echo "$side: mount failed" >&2; exit 1; }
		for j in "$@"; do job /mnt/ab-mount "r$round $side ${j%%:*}" "${j#*:}"; done
		"./$bin" -u /mnt/ab-mount
	done
done
rm -f "$E/ab-f64"
