/*
 * The GPU modes of the C test host (host.c says what each does): `gpu` and `linked`. Built
 * with host.c (tests/capi.rs, .ci/device-bundle).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuio.h"
#include "expect.h"
#include "read_file.h"
#include "../cuda/printf_line.h"

int run_gpu(const char *ptx_path);
int run_linked(const char *library_path, const char *kernel_path);

/* ---------------------------------------------------------------------------- gpu */

/* A runtime on the CUDA backend with the options `o` (its backend set here): 0, or the
 * mode's exit status: 77 (skip) without a CUDA GPU, 1 on another failure. */
static int cuda_runtime(gpuio_runtime_options *o, gpuio_runtime **rt) {
    gpuio_status s;
    o->backend = GPUIO_BACKEND_CUDA;
    s = gpuio_runtime_create(o, rt);
    if (s == GPUIO_ERROR_BACKEND_UNAVAILABLE) {
        fprintf(stderr, "skip: no CUDA GPU: %s\n", gpuio_last_error());
        return 77;
    }
    expect("create cuda runtime", s, GPUIO_OK);
    return s == GPUIO_OK ? 0 : 1;
}

/* Loads the PTX with the CUDA driver itself, attaches it, launches hello 2 x 32 with
 * cuLaunchKernel. Returns 0, or 1 after a failure. */
static int attach_and_launch_ourselves(gpuio_runtime *rt, const char *ptx) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*cuDeviceGet)(int *, int);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuModuleLoadData)(void **, const void *);
    int (*cuModuleGetFunction)(void **, void *, const char *);
    int (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                          void **, void **);
    void *ctx = NULL, *mod = NULL, *fn = NULL;
    int dev = 0;
    if (lib == NULL) {
        fprintf(stderr, "FAIL: dlopen libcuda.so.1\n");
        return 1;
    }
    *(void **)&cuDeviceGet = dlsym(lib, "cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&cuModuleLoadData = dlsym(lib, "cuModuleLoadData");
    *(void **)&cuModuleGetFunction = dlsym(lib, "cuModuleGetFunction");
    *(void **)&cuLaunchKernel = dlsym(lib, "cuLaunchKernel");
    if (!cuDeviceGet || !cuDevicePrimaryCtxRetain || !cuCtxSetCurrent || !cuModuleLoadData || !cuModuleGetFunction ||
        !cuLaunchKernel) {
        fprintf(stderr, "FAIL: libcuda.so.1 lacks a symbol\n");
        return 1;
    }
    /* The runtime initialised the driver and uses device 0's primary context. */
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&mod, ptx) || cuModuleGetFunction(&fn, mod, "hello")) {
        fprintf(stderr, "FAIL: loading the PTX with the driver\n");
        return 1;
    }
    expect("attach_cuda_module", gpuio_attach_cuda_module(rt, mod, NULL), GPUIO_OK);
    expect("prepare_launch", gpuio_prepare_launch(rt), GPUIO_OK);
    if (cuLaunchKernel(fn, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)) {
        fprintf(stderr, "FAIL: cuLaunchKernel\n");
        return 1;
    }
    /* The module stays loaded until the runtime is destroyed (the caller's duty). */
    return 0;
}

int run_gpu(const char *ptx_path) {
    gpuio_runtime_options o;
    gpuio_runtime *rt = NULL;
    gpuio_module *m = NULL, *m2 = NULL;
    gpuio_sync_report report;
    gpuio_arg args[2];
    int rc;
    size_t len = 0;
    char *ptx;
    static const char bad_ptx[] = ".version 99.0\n.target sm_90\nthis is not PTX\n";

    gpuio_runtime_options_init(&o);
    if ((rc = cuda_runtime(&o, &rt)) != 0) {
        return rc;
    }
    expect("load_file", gpuio_module_load_file(rt, ptx_path, &m), GPUIO_OK);
    expect("launch hello 8 x 128", gpuio_module_launch(m, "hello", 8, 128, NULL, 0), GPUIO_OK);
    args[0] = gpuio_arg_u32(3);  /* lines */
    args[1] = gpuio_arg_u32(40); /* width */
    expect("launch stress 2 x 64", gpuio_module_launch(m, "stress", 2, 64, args, 2), GPUIO_OK);
    expect("launch unknown kernel", gpuio_module_launch(m, "no_such_kernel", 1, 1, NULL, 0), GPUIO_ERROR_NOT_FOUND);
    expect("launch with grid 0", gpuio_module_launch(m, "hello", 0, 1, NULL, 0), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("launch with a NULL name", gpuio_module_launch(m, NULL, 1, 1, NULL, 0), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("launch with a non-UTF-8 name", gpuio_module_launch(m, "hel\xfflo", 1, 1, NULL, 0),
           GPUIO_ERROR_INVALID_ARGUMENT);
    expect("launch with NULL args", gpuio_module_launch(m, "stress", 1, 1, NULL, 2), GPUIO_ERROR_INVALID_ARGUMENT);
    args[0].kind = 99;
    expect("launch with a bad arg kind", gpuio_module_launch(m, "stress", 1, 1, args, 2),
           GPUIO_ERROR_INVALID_ARGUMENT);
    expect("synchronize", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("load_data(bad PTX)", gpuio_module_load_data(rt, bad_ptx, sizeof bad_ptx, &m2), GPUIO_ERROR_DRIVER);
    expect("load_data(ELF bytes)", gpuio_module_load_data(rt, "\x7f" "ELF\x02\x01\x01\xff", 8, &m2),
           GPUIO_ERROR_INVALID_ARGUMENT);
    ptx = read_file(ptx_path, &len);
    if (ptx == NULL) {
        fprintf(stderr, "FAIL: reading %s\n", ptx_path);
        return 1;
    }
    expect("load_data", gpuio_module_load_data(rt, ptx, len + 1, &m2), GPUIO_OK);
    expect("launch hello 1 x 16 from memory", gpuio_module_launch(m2, "hello", 1, 16, NULL, 0), GPUIO_OK);
    expect("module_destroy", gpuio_module_destroy(m2), GPUIO_OK);
    expect("module_destroy again", gpuio_module_destroy(m2), GPUIO_ERROR_INVALID_HANDLE);
    if (attach_and_launch_ourselves(rt, ptx)) {
        failures++;
    }
    expect("synchronize", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("destroy (and its module)", gpuio_runtime_destroy(rt), GPUIO_OK);
    expect("module of a destroyed runtime", gpuio_module_launch(m, "hello", 1, 1, NULL, 0),
           GPUIO_ERROR_INVALID_HANDLE);
    /* The CUmodule we loaded ourselves is not unloaded by gpuio; the process exits. */
    free(ptx);
    fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A temporary file's descriptor, its name removed. */
static int temp_fd(void) {
    char path[] = "/tmp/gpuio-host-linked-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        unlink(path);
    }
    return fd;
}

/* What fd holds from its start, NUL-terminated. */
static char *read_fd(int fd, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = (char *)malloc(cap);
    ssize_t got;
    while (buf != NULL && (got = pread(fd, buf + n, cap - n - 1, (off_t)n)) > 0) {
        n += (size_t)got;
        if (cap - n < 2) {
            char *more = (char *)realloc(buf, cap * 2);
            if (more == NULL) {
                free(buf);
                return NULL;
            }
            buf = more;
            cap *= 2;
        }
    }
    if (buf != NULL) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

int run_linked(const char *library_path, const char *kernel_path) {
    enum { N = 1000 };
    gpuio_runtime_options o;
    gpuio_runtime *rt = NULL;
    gpuio_module *m = NULL;
    gpuio_sync_report report;
    gpuio_arg args[2];
    size_t len = 0, count = 0, i;
    int out = temp_fd(), err = temp_fd(), rc;
    char *library = read_file(library_path, &len), *kernel = read_file(kernel_path, &len), *text, *said, *line;
    const char *modules[2];
    char *got[N + 2], *want[N + 1];

    if (library == NULL || kernel == NULL || out < 0 || err < 0) {
        fprintf(stderr, "FAIL: reading %s and %s, or making temporary files\n", library_path, kernel_path);
        return 1;
    }
    gpuio_runtime_options_init(&o);
    o.stdout_fd = out;
    o.stderr_fd = err;
    if ((rc = cuda_runtime(&o, &rt)) != 0) {
        return rc;
    }
    modules[0] = library;
    modules[1] = kernel;
    expect("module_load_linked(library, kernel)", gpuio_module_load_linked(rt, modules, 2, &m), GPUIO_OK);
    if (m == NULL) {
        return 1;
    }
    args[0] = gpuio_arg_u32(N);
    args[1] = gpuio_arg_u64(0); /* no counts buffer */
    expect("launch printf_kernel", gpuio_module_launch(m, "printf_kernel", (N + 127) / 128, 128, args, 2), GPUIO_OK);
    expect("synchronize", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);

    /* Every thread's line, and gpuio_puts's, each exactly once, as snprintf makes them. */
    text = read_fd(out, &len);
    for (line = text; line != NULL && *line != '\0' && count < N + 2;) {
        char *end = strchr(line, '\n');
        if (end == NULL) {
            fprintf(stderr, "FAIL: a line without its newline: %s\n", line);
            return 1;
        }
        got[count++] = line;
        end[0] = '\0';
        line = end + 1;
    }
    for (i = 0; i < N; i++) {
        want[i] = printf_want_line(i);
        if (want[i] == NULL) {
            return 1;
        }
    }
    want[N] = "a line from gpuio_puts";
    if (count != N + 1 || line == NULL || (size_t)(line - text) != len) {
        fprintf(stderr, "FAIL: %zu lines or more out, want %d\n", count, N + 1);
        return 1;
    }
    qsort(got, count, sizeof got[0], compare_strings);
    qsort(want, N + 1, sizeof want[0], compare_strings);
    for (i = 0; i <= N; i++) {
        if (strcmp(got[i], want[i]) != 0) {
            fprintf(stderr, "FAIL: line %zu (sorted): got \"%s\", want \"%s\"\n", i, got[i], want[i]);
            failures++;
        }
    }
    said = read_fd(err, &len);
    if (said == NULL || strstr(said, "gpuio_printf: `%n` is not taken") == NULL) {
        fprintf(stderr, "FAIL: no word on stderr of the refused %%n; it holds: %s\n", said ? said : "(unreadable)");
        failures++;
    }
    fprintf(stderr, "linked: %zu lines, each as snprintf makes it; %d failure(s)\n", count, failures);
    return failures ? 1 : 0;
}

