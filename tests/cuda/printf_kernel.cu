// A CUDA C++ kernel printing through gpuio (tests/cuda_cpp.rs builds it with
// `nvcc -rdc=true -ptx -arch=sm_XX -I device/include` and joins its PTX with the device
// library's; tests/capi/host_gpu.c's `linked` mode loads it through the C API, and
// tests/cuda/chevrons.cu launches it with <<<...>>>). Each thread
// prints one line of every kind of conversion, its count into `counts` (if not NULL);
// each test makes the same lines with the C library's snprintf and compares.
#include <gpuio/device.h>

#include "printf_line.h"

extern "C" __global__ void printf_kernel(unsigned n, int *counts) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int d = static_cast<int>(i) * 37 - 500;
    double x = i / 7.0 - 3.0;
    const char *s = i % 2 ? "odd" : "even";
    long long big = static_cast<long long>(i) * -123456789012LL;
    size_t z = static_cast<size_t>(i) << 40;
    void *p = reinterpret_cast<void *>(static_cast<uintptr_t>(i) * 16);
    int count = gpuio_printf(PRINTF_LINE, i, d, x, x * 1e7, x, x, x, s, s, 'A' + static_cast<int>(i % 26), i * 4097u, i,
                             big, z, p);
    if (counts != nullptr) {
        counts[i] = count;
    }
    if (i == 0) {
        gpuio_puts("a line from gpuio_puts");
        // A format gpuio does not take: -1, nothing of it printed, a line on stderr.
        int refused = gpuio_printf("%n", static_cast<int *>(nullptr));
        if (counts != nullptr) {
            counts[n] = refused;
        }
    }
}

// Whole lines, each thread's in its order, under divergence and an odd block shape
// (tests/cuda_cpp.rs launches it in blocks of 97 threads, a partial warp each, with
// threads past `n`): thread i builds a 7-letter tag on its stack (a `%s` of the thread's
// own memory), then prints i % 5 lines if i % 3 == 0, one line of precisions and widths
// if i % 3 == 1, none otherwise, and one last line once its warp has reconverged.
extern "C" __global__ void divergent_kernel(unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    char tag[8];
    for (unsigned k = 0; k < 7; k++) {
        tag[k] = static_cast<char>('a' + (i + k) % 26);
    }
    tag[7] = '\0';
    if (i % 3 == 0) {
        for (unsigned k = 0; k < i % 5; k++) {
            gpuio_printf("div t=%u k=%u %s\n", i, k, tag);
        }
    } else if (i % 3 == 1) {
        gpuio_printf("div t=%u k=%u %.3s|%-9s|\n", i, 0u, tag, tag + 4);
    }
    gpuio_printf("div t=%u end\n", i);
}
