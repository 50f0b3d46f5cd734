/*
 * A HIP host of gpuio (tests/hip.rs builds it with the `cc` crate's compiler, -Wall -Wextra
 * -Werror, against libgpuio.a built with the `hip` feature, and libamdhip64):
 *
 *   hip_host CODE_OBJECT   loads the code object with hipModuleLoadData, attaches it with
 *                          gpuio_attach_hip_module, launches `stress` (2 blocks of 64
 *                          threads, 4 lines of 40 bytes each) through HIP, synchronizes:
 *                          stdout gets "t=<thread> i=<n>" lines, each once.
 *
 * Without a GPU, HIP says so: the host then checks what attaching does on the runtime it
 * gets (the CPU backend: refused, with the reason), prints "SKIP: <why>" on stdout and
 * exits 77. Exit status 0: every check passed (the caller checks the output).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <hip/hip_runtime_api.h>

#include "gpuio.h"
#include "expect.h"
#include "read_file.h"

static int hip_ok(hipError_t e, const char *what) {
    if (e != hipSuccess) {
        fprintf(stderr, "FAIL: %s: %s (%d): %s\n", what, hipGetErrorName(e), (int)e, hipGetErrorString(e));
        failures++;
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    gpuio_runtime_options o;
    gpuio_runtime *rt = NULL;
    gpuio_module *m = NULL;
    int devices = 0;
    hipError_t e;

    if (argc != 2) {
        fprintf(stderr, "usage: hip_host CODE_OBJECT\n");
        return 2;
    }
    e = hipGetDeviceCount(&devices);
    if (e != hipSuccess || devices == 0) {
        int dummy = 0;
        gpuio_backend backend;
        expect("options_init", gpuio_runtime_options_init(&o), GPUIO_OK);
        expect("create (auto)", gpuio_runtime_create(&o, &rt), GPUIO_OK);
        expect("backend", gpuio_runtime_backend(rt, &backend), GPUIO_OK);
        if (backend == GPUIO_BACKEND_CPU) {
            expect("attach NULL", gpuio_attach_hip_module(rt, NULL, 0, &m), GPUIO_ERROR_INVALID_ARGUMENT);
            expect("attach to a CPU runtime", gpuio_attach_hip_module(rt, &dummy, 0, &m),
                   GPUIO_ERROR_BACKEND_UNAVAILABLE);
            if (m != NULL) {
                fprintf(stderr, "FAIL: a failed attach left *out set\n");
                failures++;
            }
        }
        expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);
        if (failures) {
            return 1;
        }
        printf("SKIP: HIP finds no GPU: hipGetDeviceCount: %s (%d): %s\n", hipGetErrorName(e), (int)e,
               hipGetErrorString(e));
        return 77;
    }

    {
        size_t size;
        char *image = read_file(argv[1], &size);
        hipModule_t module = NULL;
        hipFunction_t stress = NULL;
        uint32_t lines = 4, width = 40;
        void *params[2];
        params[0] = &lines;
        params[1] = &width;

        if (image == NULL) {
            perror(argv[1]);
            return 1;
        }

        expect("options_init", gpuio_runtime_options_init(&o), GPUIO_OK);
        o.backend = GPUIO_BACKEND_HSA;
        expect("create (hsa)", gpuio_runtime_create(&o, &rt), GPUIO_OK);
        if (rt == NULL) {
            return 1;
        }
        if (!hip_ok(hipSetDevice(0), "hipSetDevice") || !hip_ok(hipModuleLoadData(&module, image), "hipModuleLoadData")) {
            return 1;
        }
        free(image);
        expect("attach", gpuio_attach_hip_module(rt, module, 0, &m), GPUIO_OK);
        expect("prepare_launch", gpuio_prepare_launch(rt), GPUIO_OK);
        if (hip_ok(hipModuleGetFunction(&stress, module, "stress"), "hipModuleGetFunction")) {
            hip_ok(hipModuleLaunchKernel(stress, 2, 1, 1, 64, 1, 1, 0, NULL, params, NULL), "hipModuleLaunchKernel");
        }
        expect("synchronize", gpuio_synchronize(rt, NULL), GPUIO_OK);
        expect("module_destroy", gpuio_module_destroy(m), GPUIO_OK);
        expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);
        hip_ok(hipModuleUnload(module), "hipModuleUnload");
    }
    return failures ? 1 : 0;
}
