#!/bin/bash
# Copies the host's perf and strace, with the shared libraries they load,
# into _build/tools, so that guest scripts (guest-profile.sh) can run them:
# the guest image has neither, and both come from the same Debian release
# as the guest, whose kernel perf reads. Run on the host, from the
# repository's root; installs linux-perf and strace with apt-get if they
# are missing.
set -eu
for p in perf:linux-perf strace:strace; do
	command -v "${p%%:*}" >/dev/null || apt-get install -y "${p#*:}" >/dev/null
done
d=_build/tools
mkdir -p "$d/lib"
for b in perf strace; do
	path=$(readlink -f "$(command -v "$b")")
	cp "$path" "$d/$b"
	ldd "$path" | awk '/=> \// && $1 !~ /^(libc|libm|libpthread|libdl)\.so/ {print $3}' | while read -r l; do cp -L "$l" "$d/lib/"; done
done
echo "perf and strace in $d (run them with LD_LIBRARY_PATH=$d/lib)"
