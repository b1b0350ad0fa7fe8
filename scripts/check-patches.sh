#!/usr/bin/env bash
# Each patched dependency, vendored in vendor/, is its registry crate plus one diff in
# patches/, nothing else: for every patches/NAME-VERSION.diff, download NAME VERSION from
# crates.io, check its sha256 against the registry index, apply the diff, and require that
# the result equals vendor/NAME-VERSION/ (its src/ and Cargo.toml, the only files kept)
# byte for byte.
#
#   scripts/check-patches.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for diff in patches/*.diff; do
    crate=$(basename "$diff" .diff)              # e.g. burn-flex-0.22.1
    name=${crate%-*} version=${crate##*-}
    curl -sSfL -o "$work/$crate.crate" "https://static.crates.io/crates/$name/$crate.crate"
    # The index's path: 1/, 2/, 3/a/ or ab/cd/ by the name's length.
    case ${#name} in
        1) index=1/$name ;; 2) index=2/$name ;; 3) index=3/${name:0:1}/$name ;;
        *) index=${name:0:2}/${name:2:2}/$name ;;
    esac
    expected=$(curl -sSf "https://index.crates.io/$index" | python3 -c '
import json, sys
version = sys.argv[1]
print(next(e["cksum"] for e in map(json.loads, sys.stdin) if e["vers"] == version))' "$version")
    echo "$expected  $work/$crate.crate" | sha256sum --check --quiet
    tar xzf "$work/$crate.crate" -C "$work"
    (cd "$work/$crate" && patch --quiet -p1 --no-backup-if-mismatch) <"$diff"
    kept=$(cd "vendor/$crate" && find . -type f | sort)
    [ "$kept" = "$(cd "vendor/$crate" && find ./src ./Cargo.toml -type f | sort)" ] || {
        echo "vendor/$crate holds files besides src/ and Cargo.toml" >&2; exit 1; }
    diff -r "$work/$crate/src" "vendor/$crate/src"
    diff "$work/$crate/Cargo.toml" "vendor/$crate/Cargo.toml"
    echo "vendor/$crate = $name $version from crates.io + $diff"
done
