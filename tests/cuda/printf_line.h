/*
 * The line tests/cuda/printf_kernel.cu prints from each thread, its values, and the same
 * line made by the C library (snprintf) from them: C99 and C++, for the C test host
 * (tests/capi/host_gpu.c), the CUDA runtime program (tests/cuda/chevrons.cu) and the C++
 * kernels on the CPU backend (tests/capi/device_printf.cpp, which print it themselves).
 */
#ifndef GPUIO_TEST_PRINTF_LINE_H
#define GPUIO_TEST_PRINTF_LINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRINTF_LINE "t=%u d=%+05d x=%-10.3f e=%.2e g=%g G=%#.3G a=%a s=%5s|%-5s| c=%c h=%#x o=%#o l=%lld z=%zu p=%p %%\n"

/* Thread i's values (printf_kernel.cu computes the same on the GPU). */
struct printf_values {
    int d;
    double x;
    const char *s;
    long long big;
    size_t z;
    void *p;
};

static struct printf_values printf_values_of(unsigned i) {
    struct printf_values v;
    v.d = (int)i * 37 - 500;
    v.x = i / 7.0 - 3.0;
    v.s = i % 2 ? "odd" : "even";
    v.big = (long long)i * -123456789012LL;
    v.z = (size_t)i << 40;
    v.p = (void *)((uintptr_t)i * 16);
    return v;
}

/* PRINTF_LINE's arguments for thread `i` (an unsigned), whose values are `v`. */
#define PRINTF_ARGS(i, v) \
    (i), (v).d, (v).x, (v).x * 1e7, (v).x, (v).x, (v).x, (v).s, (v).s, 'A' + (int)((i) % 26), (i) * 4097u, (i), (v).big, \
        (v).z, (v).p

/* Thread i's line as snprintf makes it, without its newline (malloc'd; NULL if out of
 * memory). */
static char *printf_want_line(unsigned i) {
    struct printf_values v = printf_values_of(i);
    char buf[512];
    int n = snprintf(buf, sizeof buf, PRINTF_LINE, PRINTF_ARGS(i, v));
    char *line = (char *)malloc((size_t)n);
    if (line != NULL) {
        memcpy(line, buf, (size_t)n - 1);
        line[n - 1] = '\0';
    }
    return line;
}

#endif
