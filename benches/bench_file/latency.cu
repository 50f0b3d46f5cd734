// bench_file's CUDA C++ round trip: `pwrite_latency` (kernels-test's Rust kernel) written
// as a CUDA C++ programmer writes it, through gpuio_pwrite. Thread 0 writes 64 bytes at
// `i * 64` of `fd` and waits for the result, `iters` times, and stores each round trip (ns,
// the GPU's global timer, as the Rust kernel's clock_ns) into `out[i]` (~0 if that write
// failed). bench_file builds it with `nvcc -rdc=true -ptx` and joins it with gpuio's device
// library.
#include <gpuio/device.h>

__device__ __forceinline__ unsigned long long clock_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void cpp_pwrite_latency(int fd, unsigned iters, unsigned long long *out) {
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
    char line[64];
    for (int k = 0; k < 63; k++) line[k] = '.';
    line[63] = '\n';
    for (unsigned i = 0; i < iters; i++) {
        line[0] = static_cast<char>('0' + i % 10);
        unsigned long long t0 = clock_ns();
        ptrdiff_t r = gpuio_pwrite(fd, line, sizeof line, static_cast<int64_t>(i) * 64);
        unsigned long long dt = clock_ns() - t0;
        out[i] = r == 64 ? dt : ~0ull;
    }
}
