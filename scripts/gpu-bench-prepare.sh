#!/usr/bin/env bash
# Builds what scripts/gpu-bench.sh carries to a GPU machine that has no Rust and no network,
# as one folder, target/gpu-bench-carry (about 30 MiB): the release binary with flex, wgpu and
# cuda (it builds without a GPU or the CUDA toolkit), stripped and gzipped; the corpus; and
# wgpu's Vulkan/EGL/GL loaders as Debian packages (unpacked there with `dpkg -x`; the NVIDIA
# driver brings its own Vulkan ICD).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p mlm-train --features ndarray,wgpu,cuda
target/release/mlm-train fetch-corpus
carry=target/gpu-bench-carry
rm -rf "$carry" && mkdir -p "$carry/debs"
strip -o "$carry/mlm-train" target/release/mlm-train
gzip -9 "$carry/mlm-train"
tar -czf "$carry/corpus.tar.gz" data/corpus
(cd "$carry/debs" && apt-get download libvulkan1 libegl1 libgl1 libglvnd0 libglx0)
du -sh "$carry"
