#!/usr/bin/env bash
# The whole GPU check as one command, for a lent machine with one NVIDIA GPU, no Rust
# toolchain and no network: flex and wgpu (the real GPU, through its Vulkan driver) at the
# same seed, cuda too where the carried binary has it, a PyTorch CUDA peer, and 200 steps of
# the main job on the GPU; then one Markdown table and the targets of docs/PERFORMANCE.md
# "CPU vs GPU". About 5 minutes on one GPU with a 16-core host.
#
# Prepare it here (Rust, network): scripts/gpu-bench-prepare.sh writes target/gpu-bench-carry
# (the binary with flex and wgpu, the corpus, the Vulkan/EGL/GL loader packages, the wheels of
# transformers); carry that folder over with this checkout. A cuda binary is carried only
# where it links (scripts/gpu-bench-prepare.sh --cuda): not on this project's machines.
#
#   scripts/gpu-bench.sh             # on the GPU machine
#   scripts/gpu-bench.sh --cpu-only  # the same steps on flex, PyTorch on the CPU: a dry run
#   scripts/gpu-bench.sh --cpu-only --quick   # fewer steps, a 2-layer "base": minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
cpu_only=false
quick=false
for arg in "$@"; do
    case $arg in
        --cpu-only) cpu_only=true ;;
        --quick) quick=true ;;
        *) echo "usage: scripts/gpu-bench.sh [--cpu-only] [--quick]" >&2; exit 2 ;;
    esac
done
bin=${MLM_TRAIN_BIN:-target/release/mlm-train}
out=${GPU_BENCH_OUT:-target/gpu-bench}
python=${PYTHON:-python3}
carry=target/gpu-bench-carry
rm -rf "$out" && mkdir -p "$out"
gpus=(wgpu)
if [ -d "$carry" ]; then
    # The cuda binary (flex, wgpu and cuda) where one was built, else flex and wgpu.
    if [ -f "$carry/mlm-train-cuda.xz" ]; then
        xz -dc "$carry/mlm-train-cuda.xz" >"$out/mlm-train" && gpus=(wgpu cuda)
    else
        xz -dc "$carry/mlm-train.xz" >"$out/mlm-train"
    fi
    chmod +x "$out/mlm-train"
    bin=$out/mlm-train
    [ -d data/plain-english ] || tar -xzf "$carry/corpus.tar.gz"
fi
[ -x "$bin" ] || { echo "no $bin: run scripts/gpu-bench-prepare.sh first" >&2; exit 1; }
[ -d data/plain-english ] || "$bin" fetch-corpus

# The PyTorch peer needs transformers: the carried wheels where this python lacks it.
if ! "$python" -c 'import transformers' 2>/dev/null && [ -d "$carry/wheels" ]; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$out/site" "$carry"/wheels/*.whl
    export PYTHONPATH="$PWD/$out/site${PYTHONPATH:+:$PYTHONPATH}"
fi

# The backends that stand for the GPU: flex itself in a dry run.
if $cpu_only; then
    gpus=() devices=flex torch_device=cpu
else
    devices=$(IFS=,; echo "${gpus[*]}") torch_device=cuda
    # wgpu's Vulkan loader, unpacked from the carried packages where the system has none;
    # the NVIDIA driver's ICD where the loader's own search finds none.
    if ! ldconfig -p | grep -q libvulkan.so.1 && [ -d "$carry/debs" ]; then
        for deb in "$carry"/debs/*.deb; do dpkg -x "$deb" "$out/root"; done
        export LD_LIBRARY_PATH="$PWD/$out/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
    fi
    nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1 \
        && [ -f "$nvidia_icd" ]; then
        export VK_DRIVER_FILES=$nvidia_icd
        export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    fi
    # cubecl-cuda's NVRTC, from PyTorch's CUDA wheels if the system has none.
    nvrtc=$("$python" -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.join(m.__path__[0], "lib"))' 2>/dev/null || true)
    [ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$nvrtc:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
fi
backends=$(IFS=,; echo "flex${gpus[*]:+,${gpus[*]}}")

# The main job's shapes, and a BERT-base-like size where a GPU shows its strength.
main=(--batch-size 64 --seq-len 64)
base=(--batch-size 32 --seq-len 128 --hidden-size 768 --layers 12 --heads 12
      --intermediate-size 3072 --vocab-size 30522)
steps=(--warmup-steps 3 --timed-steps 10) base_steps=(--warmup-steps 1 --timed-steps 3)
train_steps=200
if $quick; then
    base=(--batch-size 8 --seq-len 128 --hidden-size 768 --layers 2 --heads 12
          --intermediate-size 3072 --vocab-size 30522)
    steps=(--warmup-steps 1 --timed-steps 3) train_steps=20
fi
echo "== bench backends ($backends): main job shapes, then base"
"$bin" bench backends --backends "$backends" "${main[@]}" "${steps[@]}" --json "$out/ours-main.json"
"$bin" bench backends --backends "$backends" "${base[@]}" "${base_steps[@]}" --json "$out/ours-base.json"

echo "== PyTorch ($torch_device): transformers' BertForMaskedLM, dense and gathered"
if "$python" -c 'import torch, transformers' 2>/dev/null; then
    torch_args() { # the bench flags above, in the peer's names
        sed -e 's/--batch-size/--batch/; s/--seq-len/--seq/; s/--hidden-size/--hidden/' \
            -e 's/--intermediate-size/--intermediate/; s/--vocab-size/--vocab/' <<<"$*"
    }
    "$python" scripts/peers/torch_bert_step.py --device "$torch_device" --label main \
        --hidden 128 --layers 2 --heads 2 --intermediate 512 --vocab 8192 \
        $(torch_args "${main[@]}") --warmup 3 --steps 10 --json "$out/torch-main.json" >/dev/null
    "$python" scripts/peers/torch_bert_step.py --device "$torch_device" --label base \
        $(torch_args "${base[@]}") --warmup 1 --steps 3 --json "$out/torch-base.json" >/dev/null
else
    echo "no torch + transformers for $python: the PyTorch rows are left out"
fi

echo "== the main job, $train_steps steps: flex, then ${gpus[*]:-no GPU}"
train=(train --max-steps "$train_steps" --warmup-steps $((train_steps / 10)) --eval-every "$train_steps"
       --checkpoint-every "$train_steps")
"$bin" "${train[@]}" --backend flex --run "$out/train-flex" >"$out/train-flex.log" 2>&1
for b in "${gpus[@]}"; do
    "$bin" "${train[@]}" --backend "$b" --run "$out/train-$b" \
        --tokenizer "$out/train-flex/tokenizer.json" >"$out/train-$b.log" 2>&1
done

"$python" scripts/peers/gpu_bench_table.py "$out" "$devices"
