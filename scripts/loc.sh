#!/usr/bin/env bash
# Counts the library's non-test Go lines at a revision (default HEAD), per
# package group: "lines" is wc -l of the non-test .go files (the method of
# issue 35's baseline: redislock 864 at 3fb39f0), "code" leaves out blank
# and comment-only lines. internal/ splits into the test kit (eventtest,
# servers, tcpproxy, testproxy, testsrv, and whatever lies under
# internal/testkit/) and the runtime (every other internal package).
#   scripts/loc.sh [rev]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
files() { git ls-tree -r --name-only "$rev" -- "$@" | grep '\.go$' | grep -v '_test\.go$' || true; }
count() { # name, then files on stdin
	local name=$1 lines=0 code=0 f
	while read -r f; do
		[ -n "$f" ] || continue
		lines=$((lines + $(git show "$rev:$f" | wc -l)))
		code=$((code + $(git show "$rev:$f" | grep -cv '^\s*\(//.*\)\?$' || true)))
	done
	printf '%-22s %6d lines %6d code\n' "$name" "$lines" "$code"
}
sel() { grep "$@" || true; }
kit='^internal/(eventtest|servers|tcpproxy|testproxy|testsrv|testkit)/'
files . | sel -v / | count "dlock (root)"
for p in redislock redlock pglock pgqueue etcdlock driver internal/wake internal/rnode; do
	files "$p" | sel -E "^$p/[^/]+$" | count "$p"
done
files internal | sel -Ev "$kit" | count "internal runtime"
files internal | sel -E "$kit" | count "internal test kit"
{ files . | sel -v /; files redislock redlock pglock pgqueue driver | sel -v '/internal/'; files internal | sel -Ev "$kit"; } |
	count "total (root+redislock+redlock+pglock+pgqueue+driver+internal runtime)"
