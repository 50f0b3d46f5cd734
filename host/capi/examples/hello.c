/*
 * gpuio from C: one line from each of 1024 threads, through io_uring. On a GPU when there
 * is one and a code object for it is given (PTX on NVIDIA, a .hsaco on AMD: the kernels/
 * crate's, which has `hello`), else C kernels on the CPU backend.
 *
 *   cargo build --release -p gpuio-capi
 *   export PKG_CONFIG_PATH=$PWD/target/release
 *   cc host/capi/examples/hello.c $(pkg-config --cflags --libs gpuio) -o hello && ./hello [kernels.ptx]
 */
#include <stdio.h>

#include "gpuio.h"

static void hello(const gpuio_thread *t, void *user) {
    (void)user;
    gpuio_printf("hello from thread %llu of %llu\n", (unsigned long long)t->global_idx,
                 (unsigned long long)t->grid_dim * t->block_dim);
}

/* Prints the failed call's message; returns 1. */
static int fail(const char *what, gpuio_status s) {
    fprintf(stderr, "%s: %s: %s\n", what, gpuio_status_name(s), gpuio_last_error());
    return 1;
}

int main(int argc, char **argv) {
    gpuio_runtime_options options;
    gpuio_runtime *rt;
    gpuio_module *m;
    gpuio_backend backend;
    gpuio_sync_report report;
    gpuio_status s;
    unsigned grid = 8, block = 128;

    gpuio_runtime_options_init(&options);
    /* With a code object: a GPU if there is one (or GPUIO_BACKEND); without: the CPU. */
    options.backend = argc > 1 ? GPUIO_BACKEND_AUTO : GPUIO_BACKEND_CPU;
    if ((s = gpuio_runtime_create(&options, &rt)) != GPUIO_OK) {
        return fail("gpuio_runtime_create", s);
    }
    gpuio_runtime_backend(rt, &backend);
    if (backend != GPUIO_BACKEND_CPU) {
        if ((s = gpuio_module_load_file(rt, argv[1], &m)) != GPUIO_OK) {
            return fail("gpuio_module_load_file", s);
        }
        s = gpuio_module_launch(m, "hello", grid, block, NULL, 0);
    } else {
        s = gpuio_cpu_launch(rt, grid, block, hello, NULL);
    }
    if (s != GPUIO_OK) {
        return fail("launch", s);
    }
    /* Every line is out, or the report says what was lost where. */
    if ((s = gpuio_synchronize(rt, &report)) != GPUIO_OK) {
        return fail("gpuio_synchronize", s);
    }
    if ((s = gpuio_runtime_destroy(rt)) != GPUIO_OK) {
        return fail("gpuio_runtime_destroy", s);
    }
    return 0;
}
