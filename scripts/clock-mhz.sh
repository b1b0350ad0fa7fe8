#!/usr/bin/env bash
# The clock every core runs at while all of them are busy, in MHz: a chain of dependent
# integer adds (one a cycle on every x86-64 core) timed on each core at once; the slowest
# core's figure. /proc/cpuinfo's "cpu MHz" is the nominal clock under a hypervisor (2596 on
# a Zen 5 guest that runs at 4440), so a peak computed from it is too low. Needs a C
# compiler; prints nothing and fails without one.
set -euo pipefail
command -v cc >/dev/null || exit 1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/clock.c" <<'C'
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec a, b;
    unsigned long x = 0, n = 200000000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (unsigned long i = 0; i < n; i++)
        __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\t"
                         "add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%.0f\n", 8.0 * n / s / 1e6);
    return x != 8 * n;
}
C
cc -O2 -o "$dir/clock" "$dir/clock.c"
for i in $(seq "$(nproc)"); do "$dir/clock" > "$dir/$i.mhz" & done
wait
sort -n "$dir"/*.mhz | head -1
