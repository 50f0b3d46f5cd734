/*
 * What the C test hosts that load a file (hip_host.c, host_gpu.c) share: `read_file`.
 */
#ifndef GPUIO_TEST_READ_FILE_H
#define GPUIO_TEST_READ_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* The whole file at `path`, in memory from malloc, its size in `*len` and a NUL after it (a
 * PTX text is then a C string); NULL if it cannot be read. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = (char *)malloc((size_t)n + 1);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = '\0';
            *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

#endif
