/*
 * The line tests/cuda/printf_kernel.cu prints from each thread, and the same line made by
 * the C library (snprintf) from the same values: C99 and C++, for the C test host
 * (tests/capi/host_gpu.c) and the CUDA runtime program (tests/cuda/chevrons.cu).
 */
#ifndef GPUIO_TEST_PRINTF_LINE_H
#define GPUIO_TEST_PRINTF_LINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRINTF_LINE "t=%u d=%+05d x=%-10.3f e=%.2e g=%g G=%#.3G a=%a s=%5s|%-5s| c=%c h=%#x o=%#o l=%lld z=%zu p=%p %%\n"

/* Thread i's line as snprintf makes it, without its newline (malloc'd; NULL if out of
 * memory). */
static char *printf_want_line(unsigned i) {
    int d = (int)i * 37 - 500;
    double x = i / 7.0 - 3.0;
    const char *str = i % 2 ? "odd" : "even";
    long long big = (long long)i * -123456789012LL;
    size_t z = (size_t)i << 40;
    void *p = (void *)((uintptr_t)i * 16);
    char buf[512];
    int n = snprintf(buf, sizeof buf, PRINTF_LINE, i, d, x, x * 1e7, x, x, x, str, str, 'A' + (int)(i % 26), i * 4097u,
                     i, big, z, p);
    char *line = (char *)malloc((size_t)n);
    if (line != NULL) {
        memcpy(line, buf, (size_t)n - 1);
        line[n - 1] = '\0';
    }
    return line;
}

#endif
