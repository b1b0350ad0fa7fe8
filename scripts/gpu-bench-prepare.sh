#!/usr/bin/env bash
# Builds what scripts/gpu-bench.sh carries to a lent GPU machine (no Rust, no network), as one
# folder, target/gpu-bench-carry, under the device tool's 64 MiB for carried paths:
# - mlm-train with flex and wgpu (release, stripped, xz: 17 MiB where gzip leaves 28): wgpu
#   drives an NVIDIA GPU
#   through its Vulkan driver, and links on every machine;
# - with --cuda, mlm-train with cuda too, where it links. On this project's machines it does
#   not: cubecl-cuda 0.11.3 builds cubecl-llvm, whose build script (tracel-llvm-bundler)
#   downloads an LLVM bundle from outside the package registries, and with DOCS_RS=1 (which
#   skips it) the link ends in undefined LLVM symbols. A cuda build that fails is reported and
#   left out; it never fails the preparation;
# - the corpus;
# - Debian's Vulkan/EGL/GL loaders (unpacked there with `dpkg -x`; the NVIDIA driver brings
#   its own Vulkan ICD);
# - wheels of transformers and its needs for the PyTorch peer (CPython 3.12, the lent
#   machines' python), installed there only if its python cannot import transformers
#   (their image has it, as of 2026-11: the wheels are the fallback).
#
#   scripts/gpu-bench-prepare.sh          # flex + wgpu
#   scripts/gpu-bench-prepare.sh --cuda   # and a flex + wgpu + cuda binary, if it links
#
# Then, with the device tool: run `scripts/gpu-bench.sh` with carry ["target/gpu-bench-carry"].
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=false
for arg in "$@"; do
    case $arg in
        --cuda) cuda=true ;;
        *) echo "usage: scripts/gpu-bench-prepare.sh [--cuda]" >&2; exit 2 ;;
    esac
done
carry=target/gpu-bench-carry
rm -rf "$carry" && mkdir -p "$carry/debs" "$carry/wheels"

cargo build --release -p mlm-train --features wgpu
pack() { strip -o "$2" "$1" && xz -9 -T0 "$2"; }
pack target/release/mlm-train "$carry/mlm-train"
if $cuda; then
    # The same target folder: the flex + wgpu binary is packed already, and the dependencies
    # they share are not built twice. The cuda binary has flex and wgpu too, and replaces it
    # (two would not fit in 64 MiB).
    if cargo build --release -p mlm-train --features wgpu,cuda; then
        pack target/release/mlm-train "$carry/mlm-train-cuda"
        rm "$carry/mlm-train.xz"
    else
        echo "gpu-bench-prepare: the cuda build does not link here (cubecl-llvm's LLVM" \
            "download); carrying flex + wgpu only" >&2
    fi
fi

target/release/mlm-train fetch-corpus
tar -czf "$carry/corpus.tar.gz" data/plain-english

(cd "$carry/debs" && apt-get download libvulkan1 libegl1 libgl1 libglvnd0 libglx0)

# transformers 5.17 (the lent machines' own) and everything it needs, as binary wheels for
# CPython 3.12 on manylinux x86-64, less numpy (16 MiB, which their PyTorch has).
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${p}_x86_64")
done
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$carry/wheels" transformers==5.17.0
rm -f "$carry"/wheels/numpy-*.whl
# What travels is the checkout's files and the carried folder, 64 MiB together.
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
size=$(( ($(du -sb "$carry" | cut -f1) + tree) / 1048576 ))
echo "gpu-bench-prepare: $carry and the checkout's files: $size MiB of the device tool's 64"
[ "$size" -lt 64 ] || { echo "gpu-bench-prepare: over 64 MiB" >&2; exit 1; }
