#!/bin/bash
# A/B of two nfsrdma-mount binaries on cp -a of a source-like tree into the
# mount, as root: N files of 1-64 KiB in nested directories (made once in
# the guest's /tmp), copied in fresh each round, then removed. As
# scripts/ab-mount.sh: both binaries and the kernel's mount at once in one
# boot, alternating order by round; the median of the rounds' B/A ratios
# of files per second (above 1: B is faster), then each mount server's
# FUSE LOOKUP requests and RPCs. After each copy, and the diff that checks
# it, ls -lR of the copy twice (the second timed: a listing again soon
# after) and its rm -rf are timed too.
#
#   _build/testbed run -timeout 30m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-copy.sh
#
# N files (default 300), ROUNDS rounds (default 6).
AB_FILES=""
. /share/scripts/ab-mounts.sh
ab_mount
N=${N:-300}
src=$(mktemp -d)
trap 'ab_cleanup; rm -rf "$E"/copy-* "$src"' EXIT
ab_tree "$src"
t() { local s; s=$(date +%s%N); "$@"; echo $((($(date +%s%N) - s) / 1000)); }
lsq() { ls -lR "$1" >/dev/null; }
for round in $(seq 1 "${ROUNDS:-6}"); do
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for side in $order; do
		d=/mnt/ab-$side/copy-$side-r$round
		us=$(t cp -a "$src/t" "$d")
		echo "r$round $side cp-a $((us / N))"
		diff -r "$src/t" "$d" >/dev/null || echo "r$round $side: the copy differs" >&2
		ls -lR "$d" >/dev/null
		us2=$(t lsq "$d")
		echo "r$round $side ls-lR-again $((us2 / N))"
		us=$(t rm -rf "$d")
		echo "r$round $side rm-rf $((us / N))"
	done
done | tee "$out"
echo "us per file above (ls-lR-again: a second ls -lR right after a first); B/A of files per second:"
awk '{print $1, $2, $3, 1e6/$4}' "$out" | awk -f scripts/ab-summary.awk
ab_stats "nfsrdma-fuse:|^\s+(LOOKUP|GETATTR|ACCESS|CREATE|MKDIR|SETATTR|WRITE|COMMIT|READDIRPLUS|REMOVE|RMDIR):"
