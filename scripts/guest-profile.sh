#!/bin/bash
# Where the whole guest's time goes per I/O, for the kernel's NFS/RDMA
# mount and nfsrdma-mount on the same fio jobs, in one guest boot: a
# system-wide perf profile (cpu-clock samples of every task, kernel and
# user space, with call chains) and the mount server's system calls per
# I/O (strace -c). Where cpu-per-op.sh says which task runs, this says in
# what: the mount server's own Go code against its system calls, and which
# calls. Bundle the host's perf and strace first (the guest has neither),
# then run in the guest:
#
#   bash scripts/tools-bundle.sh
#   _build/testbed run -timeout 15m -- bash scripts/guest-profile.sh \
#       'rr4k-qd1:--rw=randread --bs=4k --iodepth=1'
#
# Each argument is NAME:FIO-ARGS (libaio, direct I/O on a 64 MiB file, RT
# seconds each, default 10). M is the nfsrdma-mount binary under /share
# (default _build/nfsrdma-mount). Prints per job and client the CPU per I/O
# by task and by user/kernel space, the mount server's user-space CPU by
# Go package, and its system calls per I/O (from a separate run: strace
# slows the mount server several times). The perf data stay in
# _build/profile-NAME-{kernel,ours}.data with the guest's symbols in
# _build/profile-kallsyms; on the host, with /share linked to the
# repository:
#
#   perf report -i _build/profile-NAME-ours.data --kallsyms=_build/profile-kallsyms
set -u
cd /share || exit 1
M=${M:-_build/nfsrdma-mount}
E=${TESTBED_INSECURE_EXPORT:-/export-insecure}
SERVER=${TESTBED_SERVER:-10.99.0.1}
HZ=500
T=/share/_build/tools
[ -x $T/perf ] && [ -x $T/strace ] || { echo "no $T/perf or $T/strace: run scripts/tools-bundle.sh on the host first" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: guest-profile.sh NAME:FIO-ARGS..." >&2; exit 2; }
perf() { LD_LIBRARY_PATH=$T/lib $T/perf "$@"; }
echo 0 > /proc/sys/kernel/kptr_restrict
echo -1 > /proc/sys/kernel/perf_event_paranoid
modprobe fuse 2>/dev/null
mkdir -p /mnt/gp-ours /mnt/gp-kernel
head -c 64M /dev/urandom > "$E/gp-f64" && chmod 644 "$E/gp-f64" && sync
cleanup() {
	"./$M" -u /mnt/gp-ours 2>/dev/null
	umount /mnt/gp-kernel 2>/dev/null
	rm -f "$E/gp-f64" /tmp/gp.data /tmp/gp-strace
}
trap cleanup EXIT
"./$M" -o proto=rdma,vers=3 "$SERVER:$E" /mnt/gp-ours 2>/dev/null || { echo "nfsrdma-mount failed" >&2; exit 1; }
mount -t nfs -o vers=3,proto=rdma,port=20049 "$SERVER:$E" /mnt/gp-kernel || exit 1
pid=$(pgrep -f "nfsrdma-mount.* /mnt/gp-ours\$" | head -1)
cp /proc/kallsyms _build/profile-kallsyms
ios() { # terse line -> I/Os (read + write)
	awk -F';' '{print $8 * $9 / 1000 + $49 * $50 / 1000}'
}
for j in "$@"; do
	name=${j%%:*} args=${j#*:}
	for side in kernel ours; do
		dir=/mnt/gp-$side
		fio --name=gp --filename="$dir/gp-f64" --direct=1 --ioengine=libaio $args --runtime=2 --time_based >/dev/null
		n=$(perf record -q -a -g -e cpu-clock -F $HZ -o /tmp/gp.data -- \
			fio --name=gp --filename="$dir/gp-f64" --direct=1 --ioengine=libaio $args --runtime="${RT:-10}" \
			--time_based --output-format=terse --terse-version=3 | ios)
		cp /tmp/gp.data "_build/profile-$name-$side.data"
		echo "== $name $side: $n I/Os; CPU per I/O (us) by task and space"
		perf report -i /tmp/gp.data --no-children --sort comm,dso -q --stdio -g none -F sample,comm,dso 2>/dev/null |
			awk -v n="$n" -v hz=$HZ '$2 != "swapper" && $1 * 1e6 / hz / n >= 5 {printf "  %8.0f  %s %s\n", $1 * 1e6 / hz / n, $2, $3}'
		perf report -i /tmp/gp.data --no-children --sort comm -q --stdio -g none -F sample,comm 2>/dev/null |
			awk -v n="$n" -v hz=$HZ '$2 != "swapper" {s += $1} END {printf "  %8.0f  all tasks\n", s * 1e6 / hz / n}'
		[ $side = ours ] || continue
		echo "== $name ours: the mount server's user-space CPU per I/O (us) by package"
		perf report -i /tmp/gp.data --comm nfsrdma-mount --dso "$(basename "$M")" --no-children --sort sym -q --stdio -g none -F sample,sym 2>/dev/null |
			awk -v n="$n" -v hz=$HZ '{p = $3; sub(/\(.*/, "", p); sub(/^github.com\/nfsrdma\/nfsrdma\//, "", p)
				if (p ~ /^github.com\/hanwen/) p = "go-fuse"; else if (p ~ /\//) { sub(/\.[^\/]*$/, "", p) } else sub(/\..*/, "", p)
				g[p] += $1; t += $1 }
				END { for (k in g) if (g[k] * 1e6 / hz / n >= 5) printf "  %8.0f  %s\n", g[k] * 1e6 / hz / n, k; printf "  %8.0f  all\n", t * 1e6 / hz / n }' | sort -rn
		echo "== $name ours: the mount server's system calls per I/O (strace -c -f, separate run)"
		LD_LIBRARY_PATH=$T/lib $T/strace -c -f -q -p "$pid" -o /tmp/gp-strace &
		st=$!
		sleep 1
		n=$(fio --name=gp --filename="$dir/gp-f64" --direct=1 --ioengine=libaio $args --runtime="${RT:-10}" \
			--time_based --output-format=terse --terse-version=3 | ios)
		kill -INT $st
		wait $st
		awk -v n="$n" '$4 ~ /^[0-9]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" {
			printf "  %6.2f  %s\n", $4 / n, $NF; s += $4 } END { printf "  %6.2f  all\n", s / n }' /tmp/gp-strace | sort -rn | head -16
	done
done
