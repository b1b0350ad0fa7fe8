#!/usr/bin/env bash
# mlm-train's architectural rules (docs/ARCHITECTURE.md), checked on the code (comments, doc
# links included, are left out):
# 1. A top-level module of crates/mlm-train/src uses only the modules declared before it in
#    lib.rs, so the dependencies point one way and there is no cycle. Reads the order from
#    lib.rs and every `crate::NAME` path of each module's code; a NAME that is no module is
#    an import through a root re-export (`crate::TrainConfig`), which hides the module it
#    comes from: refused, name the module (`crate::config::TrainConfig`).
# 2. One folder per model architecture, `model/ARCH/`: adding a family touches its folder
#    and the registry (`model/family.rs`). So an architecture's folder is named (`ARCH::`)
#    only by `model/mod.rs`, the registry and its own files; the rest of the crate uses what
#    `model` exports; and no architecture's folder reaches into another's.
# Prints each module's dependencies; exits 1 naming every use that breaks a rule.
set -euo pipefail
src="$(dirname "$0")/../crates/mlm-train/src"
mapfile -t order < <(sed -n 's/^pub mod \([a-z_]*\);$/\1/p' "$src/lib.rs")
declared=" ${order[*]} "
wrong=0
# The code of FILES..., comments dropped.
code() { grep -hv '^\s*//' "$@" | sed 's://.*$::'; }
for i in "${!order[@]}"; do
    module=${order[$i]}
    if [ -d "$src/$module" ]; then
        mapfile -t files < <(find "$src/$module" -name '*.rs')
    else
        files=("$src/$module.rs")
    fi
    uses=$(code "${files[@]}" | grep -oE 'crate::[A-Za-z_][A-Za-z0-9_]*' | sed 's/crate:://' \
        | sort -u | grep -vx "$module" || true)
    below=" ${order[*]:0:$i} "
    echo "$module -> $(echo $uses)"
    for used in $uses; do
        if [[ "$declared" != *" $used "* ]]; then
            echo "  $module uses crate::$used, which lib.rs does not declare as a module (an" \
                "import through a root re-export? name its module)" >&2
            grep -n "crate::$used\b" "${files[@]}" | grep -v '^\S*:\s*//' >&2 || true
            wrong=1
        elif [[ "$below" != *" $used "* ]]; then
            echo "  $module uses crate::$used, declared after it in lib.rs: a dependency upwards" >&2
            grep -n "crate::$used\b" "${files[@]}" | grep -v '^\S*:\s*//' >&2 || true
            wrong=1
        fi
    done
done
model="$src/model"
mapfile -t architectures < <(find "$model" -mindepth 1 -maxdepth 1 -type d ! -name hf -printf '%f\n' | sort)
for arch in "${architectures[@]}"; do
    while IFS= read -r file; do
        case "$file" in
            "$model/mod.rs" | "$model/family.rs" | "$model/$arch/"*) continue ;;
        esac
        if code "$file" | grep -qE "(model|super)::$arch\b"; then
            echo "  $file names the architecture folder model/$arch/: use what model exports" \
                "(or, for dispatch on the family, the registry model/family.rs)" >&2
            grep -nE "(model|super)::$arch\b" "$file" | grep -v '^\S*:\s*//' >&2 || true
            wrong=1
        fi
    done < <(find "$src" -name '*.rs')
done
echo "model architectures: ${architectures[*]} (registry: model/family.rs)"
if [ "$wrong" -ne 0 ]; then
    echo "check-architecture: dependencies break docs/ARCHITECTURE.md's rules" >&2
    exit 1
fi
echo "check-architecture: ${#order[@]} modules, every dependency points to an earlier one;" \
    "each architecture folder is reached through model's exports and its registry"
