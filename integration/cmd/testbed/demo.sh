#!/bin/bash
# The nfsrdma demo, run inside the test bed by `testbed demo`: mount knfsd's
# export over RDMA with nfsrdma-mount, copy a tree in and out, check it,
# show the transport's counters, unmount.
set -u
cd "$(dirname "$0")"
say() { printf '\n== %s\n' "$*"; }
fail() { printf '\nDEMO FAILED: %s\n' "$*"; exit 1; }
MNT=/mnt/nfsrdma
SRC=/tmp/demo-tree
BACK=/tmp/demo-back

say "The bed: Soft-RoCE device rxe0 on dummy0 (10.99.0.1) and the Linux NFS server exporting /export over RDMA port 20049"
rdma link show | grep -q "rxe0.*ACTIVE" && rdma link show || fail "no active rxe0"
grep rdma /proc/fs/nfsd/portlist || fail "knfsd is not listening on RDMA"
modprobe fuse 2>/dev/null

say "Mounting 10.99.0.1:/export on $MNT with nfsrdma-mount (user space, NFSv3 over RDMA, no kernel NFS client)"
mkdir -p "$MNT"
./nfsrdma-mount -o proto=rdma,vers=3 10.99.0.1:/export "$MNT" || fail "nfsrdma-mount could not mount the export"
grep " $MNT " /proc/mounts || fail "the mount is not live"

say "Making a tree to copy: 300 files of various sizes in 12 directories"
rm -rf "$SRC" "$BACK"
for d in $(seq 1 12); do
	mkdir -p "$SRC/dir$d/sub"
	for f in $(seq 1 25); do
		head -c $(( (d * 7919 + f * 104729) % 300000 + 1 )) /dev/urandom > "$SRC/dir$d/file$f"
	done
	ln -s "../file1" "$SRC/dir$d/sub/link-to-file1"
done
du -sh "$SRC"

# The export squashes root (exports(5)'s default root_squash): root's files
# are nobody's on the server, so the copy keeps modes and times, not owners.
say "Copying it into the mount (over RDMA)"
time cp -R --preserve=mode,timestamps "$SRC" "$MNT/demo-tree" || fail "copy in failed"
say "Copying it back out"
time cp -R --preserve=mode,timestamps "$MNT/demo-tree" "$BACK" || fail "copy out failed"

say "Checking: the copy that went through nfsrdma equals the original, and so does the server's own copy in /export"
diff -r "$SRC" "$BACK" || fail "the tree read back differs"
diff -r "$SRC" /export/demo-tree || fail "the server's copy differs"
echo "identical: $(find "$SRC" -type f | wc -l) files, $(find "$SRC" -type l | wc -l) symlinks"

say "Transport counters (nfsrdma-mount stats)"
./nfsrdma-mount stats "$MNT" || fail "stats failed"

say "Unmounting"
rm -rf "$MNT/demo-tree"
./nfsrdma-mount -u "$MNT" || fail "unmount failed"
grep -q " $MNT " /proc/mounts && fail "still mounted"
say "Done: the export was mounted over RDMA in user space, 300 files went in and out byte for byte, and it is unmounted again."
