#!/usr/bin/env bash
# mlm-train's one architectural rule (docs/ARCHITECTURE.md): a top-level module of
# crates/mlm-train/src uses only the modules declared before it in lib.rs, so the
# dependencies point one way and there is no cycle. Reads the order from lib.rs and every
# `crate::MODULE` path in each module's code (comments, doc links included, are left out).
# Prints each module's dependencies; exits 1 naming every use that points the wrong way.
set -euo pipefail
src="$(dirname "$0")/../crates/mlm-train/src"
mapfile -t order < <(sed -n 's/^pub mod \([a-z_]*\);$/\1/p' "$src/lib.rs")
declared=" ${order[*]} "
wrong=0
for i in "${!order[@]}"; do
    module=${order[$i]}
    if [ -d "$src/$module" ]; then files=("$src/$module"); else files=("$src/$module.rs"); fi
    uses=$(grep -rhv '^\s*//' "${files[@]}" --include='*.rs' | sed 's://.*$::' \
        | grep -oE 'crate::[a-z_]+' | sed 's/crate:://' | sort -u | grep -vx "$module" || true)
    below=" ${order[*]:0:$i} "
    echo "$module -> $(echo $uses)"
    for used in $uses; do
        if [[ "$declared" != *" $used "* ]]; then
            echo "  $module uses crate::$used, which lib.rs does not declare" >&2
            wrong=1
        elif [[ "$below" != *" $used "* ]]; then
            echo "  $module uses crate::$used, declared after it in lib.rs: a dependency upwards" >&2
            grep -rn "crate::$used\b" "${files[@]}" --include='*.rs' | grep -v '^\S*:\s*//' >&2 || true
            wrong=1
        fi
    done
done
if [ "$wrong" -ne 0 ]; then
    echo "check-architecture: dependencies point the wrong way (docs/ARCHITECTURE.md)" >&2
    exit 1
fi
echo "check-architecture: ${#order[@]} modules, every dependency points to an earlier one"
