# Sourced by the A/B scripts (ab-mount.sh, ab-bufwrite.sh, ab-meta.sh,
# ab-copy.sh, ab-open.sh, ab-tar.sh), in the guest:
# checks A and B, mounts the kernel's NFS/RDMA client at /mnt/ab-kernel and
# the two nfsrdma-mount binaries at /mnt/ab-A and /mnt/ab-B, all on the
# same export, and unmounts them and removes AB_FILES (paths under the
# export) and $out at exit. Sets E (the export), SERVER and out (a
# scratch file for the rounds' lines); ab_mount sets pidA and pidB, the
# two mount servers' process IDs; ab_tree makes the source-like tree the
# copy scripts use. OPTS_A and OPTS_B, if set, are more -o options for
# that side's mount (say OPTS_B=rsize=262144,wsize=262144 to A/B one
# binary against itself with another setting); ENV_A and ENV_B, if set,
# are NAME=VALUE words put in that side's mount server's environment.
set -u
cd /share || exit 1
A=${A:?A=path of the first nfsrdma-mount binary}
B=${B:?B=path of the second nfsrdma-mount binary}
E=${TESTBED_INSECURE_EXPORT:-/export-insecure}
SERVER=${TESTBED_SERVER:-10.99.0.1}
modprobe fuse 2>/dev/null
mkdir -p /mnt/ab-kernel /mnt/ab-A /mnt/ab-B
out=$(mktemp)
ab_cleanup() {
	umount /mnt/ab-kernel 2>/dev/null
	"./$A" -u /mnt/ab-A 2>/dev/null
	"./$B" -u /mnt/ab-B 2>/dev/null
	for f in ${AB_FILES:-}; do rm -f "$E/$f"; done
	rm -f "$out"
}
trap ab_cleanup EXIT
ab_mount() {
	mount -t nfs -o vers=3,proto=rdma,port=20049 "$SERVER:$E" /mnt/ab-kernel || exit 1
	env ${ENV_A:-} "./$A" -o proto=rdma,vers=3${OPTS_A:+,$OPTS_A} "$SERVER:$E" /mnt/ab-A 2>/dev/null || { echo "A: mount failed" >&2; exit 1; }
	env ${ENV_B:-} "./$B" -o proto=rdma,vers=3${OPTS_B:+,$OPTS_B} "$SERVER:$E" /mnt/ab-B 2>/dev/null || { echo "B: mount failed" >&2; exit 1; }
	pidA=$(pgrep -f "nfsrdma-mount.* /mnt/ab-A\$" | head -1)
	pidB=$(pgrep -f "nfsrdma-mount.* /mnt/ab-B\$" | head -1)
}
# ab_stats PATTERN: each mount server's `nfsrdma-mount stats` lines that
# match the extended regular expression PATTERN, under its side's name.
ab_stats() {
	for side in A B; do
		echo "== $side"
		"./$(eval echo \$$side)" stats "/mnt/ab-$side" | grep -E "$1"
	done
}
# ab_tree DIR: a source-like tree at DIR/t, the same every time: N files
# (default 300) of 1-64 KiB in directories three deep, 8 files a
# directory.
ab_tree() {
	perl -e '
	srand(1);
	for $i (1..'"${N:-300}"') {
		$d = sprintf("%s/t/d%d/e%d/f%d", "'"$1"'", $i % 5, ($i / 5) % 4, int($i / 40));
		system("mkdir", "-p", $d) unless -d $d;
		open(F, ">", "$d/s$i.c") or die; print F "x" x (1024 * (1 + int(rand(64)))); close F;
	}'
}
