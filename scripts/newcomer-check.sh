#!/usr/bin/env bash
# mlm-core as a newcomer meets it: a fresh crate outside this workspace, with only what
# crates/mlm-core/README.md says to write (its [dependencies] block and its "Use it in your
# model" program), depending on mlm-core as `cargo package` would publish it. It must build
# and run: the program asserts that the tied head starts near ln(vocab_size) and trains.
#
# Catches what the workspace hides: features the workspace turns on for mlm-core but a user
# would not (the root package's dev-dependencies), the [patch.crates-io] that a user's build
# never sees, files the package leaves out (README.md is the lib page), and a README that no
# longer compiles against the packaged crate. CI runs it; the build goes to
# target/newcomer (CARGO_TARGET_DIR), so a rerun is incremental.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
readme=crates/mlm-core/README.md

# mlm-core as it would be published (the .crate file, unpacked), not the workspace's folder.
cargo package -p mlm-core --no-verify --allow-dirty --quiet
version=$(cargo pkgid -p mlm-core | sed 's/.*[#@]//')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "target/package/mlm-core-$version.crate" -C "$work"

# The README's first toml block is the user's [dependencies]; point its path at the package.
mkdir -p "$work/newcomer/src"
{
    printf '[package]\nname = "newcomer"\nversion = "0.1.0"\nedition = "2024"\n\n'
    awk '/^```toml/{n++; next} /^```/{if (n==1) exit} n==1' "$readme" \
        | sed "s|path = \"[^\"]*mlm-core\"|path = \"$work/mlm-core-$version\"|"
} >"$work/newcomer/Cargo.toml"
grep -q "mlm-core-$version" "$work/newcomer/Cargo.toml" \
    || { echo "newcomer-check: the README's dependency block names no mlm-core path" >&2; exit 1; }
# The README's first rust block is the whole program.
awk '/^```rust/{n++; next} /^```/{if (n==1) exit} n==1' "$readme" >"$work/newcomer/src/main.rs"
[ -s "$work/newcomer/src/main.rs" ] || { echo "newcomer-check: no rust block in $readme" >&2; exit 1; }

export CARGO_TARGET_DIR="$root/target/newcomer"
# No debug info: what is tested is unchanged, and CI's disk is small. The README's program
# compiles without a warning (dependencies' lints are capped by cargo).
export CARGO_PROFILE_DEV_DEBUG=false RUSTFLAGS="-D warnings"
cd "$work/newcomer"
start=$(date +%s)
cargo build --quiet
echo "newcomer-check: first build of the README's crate in $(($(date +%s) - start)) s"
cargo run --quiet
echo "newcomer-check: the README's program ran (loss started near ln(vocab_size))"
