#!/bin/bash
# A/B of two nfsrdma-mount binaries on tar -x, as root, of N files of 4 KiB
# in directories of 50 (owners, modes and times varied, so that tar sets
# them all), into each mount in turn; then tar --compare of each
# extraction through all three mounts (untimed; close-to-open: what one
# mount wrote and closed, the others read as written). As
# scripts/ab-mount.sh: both binaries and the kernel's mount at once in one
# boot, alternating order by round; the median of the rounds' B/A ratios
# of files per second (above 1: B is faster), then each mount server's
# RPC counts.
#
#   _build/testbed run -timeout 25m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-tar.sh
#
# N files (default 500), ROUNDS rounds (default 6).
AB_FILES=""
. /share/scripts/ab-mounts.sh
ab_mount
N=${N:-500}
src=$(mktemp -d)
trap 'ab_cleanup; rm -rf "$E"/tar-* "$src"' EXIT
perl -e 'for $i (0..'"$N"'-1) { $d = "'"$src"'/t/d" . int($i / 50); mkdir "'"$src"'/t"; mkdir $d; $f = "$d/f$i"; open(F, ">", $f) or die; print F chr(65 + $i % 26) x 4096; close F; chmod(($i % 3 == 0) ? 0600 : 0644, $f); chown(1000 + $i % 4, 1000 + $i % 2, $f); utime(1e9 + $i, 1e9 + $i, $f) }'
tar -C "$src" -cf "$src/small.tar" t
t() { local s; s=$(date +%s%N); "$@"; echo $((($(date +%s%N) - s) / 1000)); }
for round in $(seq 1 "${ROUNDS:-6}"); do
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for side in $order; do
		d=/mnt/ab-$side/tar-$side-r$round
		mkdir -p "$d"
		us=$(t tar -xf "$src/small.tar" -C "$d")
		echo "r$round $side tar-x $((us / N))"
		(cd "$d" && tar --compare -f "$src/small.tar" >/dev/null 2>&1) || echo "r$round $side: the extracted tree differs: $(cd "$d" && tar --compare -f "$src/small.tar" 2>&1 | head -3)" >&2
		# Read back through the other mounts (close-to-open).
		for other in kernel A B; do
			[ "$other" = "$side" ] && continue
			(cd "/mnt/ab-$other/tar-$side-r$round" && tar --compare -f "$src/small.tar" >/dev/null 2>&1) || echo "r$round $side via $other: differs: $(cd "/mnt/ab-$other/tar-$side-r$round" && tar --compare -f "$src/small.tar" 2>&1 | head -3)" >&2
		done
	done
done | tee "$out"
echo "us per file above; B/A of files per second:"
awk '{print $1, $2, $3, 1e6/$4}' "$out" | awk -f scripts/ab-summary.awk
ab_stats "nfsrdma-fuse:|^\s+(LOOKUP|GETATTR|ACCESS|CREATE|MKDIR|SETATTR|WRITE|COMMIT):"
