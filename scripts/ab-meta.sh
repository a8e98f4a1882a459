#!/bin/bash
# A/B of two nfsrdma-mount binaries on small operations in directories made
# at the server (which the mounts have not seen): N renames of files the
# server made, N mkdirs and N creates (open O_CREAT and close), each from
# one process (perl). As scripts/ab-mount.sh: both binaries and the
# kernel's mount at once in one boot, alternating order by round; per
# operation, the median of the rounds' B/A ratios of operations per second
# (above 1: B is faster), then each mount server's RPC counts.
#
#   _build/testbed run -timeout 30m -env A=_build/nfsrdma-mount.old -env B=_build/nfsrdma-mount \
#       -- bash scripts/ab-meta.sh
#
# N operations of each kind per round (default 300), ROUNDS rounds
# (default 6).
AB_FILES=""
. /share/scripts/ab-mounts.sh
ab_mount
N=${N:-300}
trap 'ab_cleanup; rm -rf "$E"/meta-*' EXIT
t() { local s; s=$(date +%s%N); "$@"; echo $((($(date +%s%N) - s) / 1000)); }
for round in $(seq 1 "${ROUNDS:-6}"); do
	for side in kernel A B; do
		mkdir -p "$E/meta-$side/r$round/ren" "$E/meta-$side/r$round/mk"
		perl -e 'for (1..'"$N"') { open(F, ">", "'"$E/meta-$side/r$round/ren"'/a$_") or die; close F }'
		chmod -R 777 "$E/meta-$side"
	done
	order="kernel A B"
	[ $((round % 2)) = 0 ] && order="B A kernel"
	for side in $order; do
		d=/mnt/ab-$side/meta-$side/r$round
		us=$(t perl -e "rename \"$d/ren/a\$_\", \"$d/ren/b\$_\" or die for 1..$N")
		echo "r$round $side rename $((us / N))"
		us=$(t perl -e "mkdir \"$d/mk/m\$_\" or die for 1..$N")
		echo "r$round $side mkdir $((us / N))"
		us=$(t perl -e "for (1..$N) { open(F, \">\", \"$d/mk/f\$_\") or die; close F }")
		echo "r$round $side create $((us / N))"
	done
done | tee "$out"
echo "us per operation above; B/A of operations per second:"
awk '{print $1, $2, $3, 1e6/$4}' "$out" | awk -f scripts/ab-summary.awk
ab_stats "^\s+(LOOKUP|READDIRPLUS|RENAME|MKDIR|CREATE):"
