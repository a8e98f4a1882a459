#!/usr/bin/env bash
# Mutation harness: proves that each listed rule test fails when its rule
# is broken on purpose.
#
#   scripts/mutate.sh [LIST]          default LIST: scripts/mutations.txt
#
# The list holds one record per mutation, records separated by blank lines,
# '#' lines are comments:
#
#   id:   a short unique name
#   file: path of the file to break, from the repository root
#   orig: a snippet of that file (one line or part of one; exact, and it
#         must occur exactly once in the file)
#   repl: what replaces the snippet (may be empty)
#   (more orig:/repl: pairs may follow, for a break that needs two edits;
#   they are applied in order)
#   pkg:  the package(s) whose tests must catch it, e.g. ./flowctl/
#   run:  the -run regexp of the tests that must fail
#
# Each mutation is applied alone in a scratch copy of the working tree
# (never in the tree itself), and the named tests run there with a
# timeout. Before the first mutation of each (pkg, run) pair the same tests
# run on the unbroken copy and must pass. Verdicts:
#   KILLED       the tests failed (or timed out) with the mutation
#   SURVIVED     the tests passed with the mutation: the rule is untested
#   NOT-APPLIED  the snippet is not in the file exactly once
#   BUILD-FAIL   the mutated code does not compile (proves nothing)
#   BASELINE-FAIL the tests fail without any mutation (proves nothing)
# The script exits non-zero unless every mutation is KILLED.
#
# Environment: MUTATE_ONLY=regexp runs only the ids that match;
# MUTATE_TIMEOUT (default 300s) bounds each test run; MUTATE_FLAGS adds go
# test flags (e.g. -race); GO (default go).
set -u -o pipefail

list=${1:-scripts/mutations.txt}
root=$(cd "$(dirname "$0")/.." && pwd)
case $list in /*) ;; *) list=$root/$list ;; esac
[ -f "$list" ] || { echo "mutate: no list $list" >&2; exit 2; }
GO=${GO:-go}
timeout_s=${MUTATE_TIMEOUT:-300}
only=${MUTATE_ONLY:-}
flags=${MUTATE_FLAGS:-}
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"

scratch=$(mktemp -d /tmp/nfsrdma-mutate.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# The working tree as it is (uncommitted edits included), without .git and
# build outputs.
tar -C "$root" --exclude=./.git --exclude=./_build -cf - . | tar -C "$scratch" -xf -
log=$scratch/.mutate-logs
mkdir -p "$log"
# Read a copy: the list may be edited while the run goes on.
cp "$list" "$log/list"
list=$log/list

declare -A baseline
results=()
failed=0

# runtests PKG RUN LOGFILE: 0 if the tests pass, 1 if they fail, 2 if the
# package does not build.
runtests() {
	local pkg=$1 run=$2 out=$3 rc
	# shellcheck disable=SC2086
	(cd "$scratch" && timeout -k 10 "$timeout_s" $GO test -count=1 $flags -timeout "${timeout_s}s" -run "$run" $pkg) >"$out" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then
		if grep -q -e '^ok .*\[no tests to run\]' -e 'no test files' "$out"; then
			echo "mutate: '$run' ran no test in $pkg" >>"$out"
			return 3
		fi
		return 0
	fi
	if grep -q -e '\[build failed\]' -e '\[setup failed\]' "$out"; then return 2; fi
	return 1
}

apply() { # FILE ORIG REPL: 0 applied, 1 not exactly one occurrence
	ORIG=$2 REPL=$3 perl -0777 -i -pe '
		BEGIN { $o = $ENV{ORIG}; $r = $ENV{REPL}; }
		my $n = () = /\Q$o\E/g;
		if ($n != 1) { $ENV{MUTATE_N} = $n; exit 1 }
		s/\Q$o\E/$r/;
	' "$1"
}

mutate_one() { # id file pkg run; the pairs in origs[] and repls[]
	local id=$1 file=$2 pkg=$3 run=$4 verdict rc key i
	if [ -n "$only" ] && ! [[ $id =~ $only ]]; then return; fi
	key="$pkg|$run"
	if [ -z "${baseline[$key]:-}" ]; then
		runtests "$pkg" "$run" "$log/baseline.$id"
		baseline[$key]=$?
	fi
	local start=$SECONDS
	if [ "${baseline[$key]}" != 0 ]; then
		verdict=BASELINE-FAIL
	elif [ ! -f "$scratch/$file" ]; then
		verdict=NOT-APPLIED
	else
		cp "$scratch/$file" "$log/orig.$id"
		verdict=
		for i in "${!origs[@]}"; do
			apply "$scratch/$file" "${origs[$i]}" "${repls[$i]}" || verdict=NOT-APPLIED
		done
		if [ -z "$verdict" ]; then
			runtests "$pkg" "$run" "$log/$id"
			rc=$?
			case $rc in
			0) verdict=SURVIVED ;;
			1) verdict=KILLED ;;
			2) verdict=BUILD-FAIL ;;
			*) verdict=BASELINE-FAIL ;;
			esac
		fi
		cp "$log/orig.$id" "$scratch/$file"
	fi
	[ "$verdict" = KILLED ] || failed=1
	local line by=
	if [ "$verdict" = KILLED ]; then
		by=$(grep -o -e '^--- FAIL: [^ ]*' -e '^panic: .\{0,60\}' -e '^FAIL.*(timed out)\|^\*\*\* Test killed.*' "$log/$id" | sed 's/^--- FAIL: //' | sort -u | head -4 | paste -sd, -)
		[ -n "$by" ] || by=$(grep -m1 -o 'test timed out.*\|signal: killed' "$log/$id")
	fi
	line=$(printf '%-13s %-34s %4ss  %s  -run %s%s' "$verdict" "$id" $((SECONDS - start)) "$pkg" "$run" "${by:+  killed by: $by}")
	echo "$line"
	results+=("$line")
	if [ "$verdict" != KILLED ] && [ -f "$log/$id" ]; then
		sed -n '1,30p' "$log/$id" | sed 's/^/    | /'
	fi
}

id= file= pkg= run= origs=() repls=()
flush() {
	if [ -n "$id" ]; then
		if [ -z "$file" ] || [ ${#origs[@]} = 0 ] || [ ${#origs[@]} != ${#repls[@]} ] || [ -z "$pkg" ] || [ -z "$run" ]; then
			echo "mutate: record $id is incomplete (needs file, orig/repl pairs, pkg, run)" >&2
			failed=1
		else
			mutate_one "$id" "$file" "$pkg" "$run"
		fi
	fi
	id= file= pkg= run= origs=() repls=()
}
while IFS= read -r l || [ -n "$l" ]; do
	case $l in
	'#'*) continue ;;
	'') flush ;;
	id:*) id=${l#id:}; id=${id# } ;;
	file:*) file=${l#file:}; file=${file# } ;;
	orig:*) origs+=("${l#orig: }") ;;
	repl:*) r=${l#repl:}; repls+=("${r# }") ;;
	pkg:*) pkg=${l#pkg:}; pkg=${pkg# } ;;
	run:*) run=${l#run:}; run=${run# } ;;
	*) echo "mutate: cannot parse: $l" >&2; failed=1 ;;
	esac
done <"$list"
flush

echo
echo "mutations: ${#results[@]}, killed: $(printf '%s\n' "${results[@]}" | grep -c '^KILLED')"
exit $failed
