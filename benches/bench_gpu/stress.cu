// bench_gpu's CUDA C++ kernels (`--kernel cpp`): the `stress` kernel's lines, `lines` lines
// `t=<global thread index> i=<line number>` per thread padded with `.` to `width` bytes with
// the newline, through gpuio_printf (`cpp_stress`) and through CUDA's printf
// (`cpp_printf_stress`), the same format and arguments. bench_gpu builds this with
// `nvcc -rdc=true -ptx` and joins its PTX with gpuio's device library, as a CUDA C++
// programmer does (docs/USAGE.md), and checks every line as it checks the Rust kernel's.
#include <gpuio/device.h>

#define GPUIO_DOTS16 "................"
#define GPUIO_DOTS64 GPUIO_DOTS16 GPUIO_DOTS16 GPUIO_DOTS16 GPUIO_DOTS16
#define GPUIO_DOTS256 GPUIO_DOTS64 GPUIO_DOTS64 GPUIO_DOTS64 GPUIO_DOTS64

// 1,024 dots: a line's padding is a suffix of it (as the Rust `printf_stress` pads: CUDA
// documents `*` for a field's width only, not its precision), so padding is cut at 1,024.
__device__ const char dots[] = GPUIO_DOTS256 GPUIO_DOTS256 GPUIO_DOTS256 GPUIO_DOTS256;

__device__ __forceinline__ unsigned digits(unsigned long long n) {
    unsigned d = 1;
    for (; n >= 10; n /= 10) d++;
    return d;
}

// The padding of line `i` of thread `t`: "t=" and " i=" (5 bytes), the two numbers and the
// newline, then dots up to `width`.
__device__ __forceinline__ const char *padding(unsigned long long t, unsigned i, unsigned width) {
    unsigned text = 5 + digits(t) + digits(i) + 1;
    unsigned n = width > text ? width - text : 0;
    if (n > 1024) n = 1024;
    return dots + 1024 - n;
}

__device__ __forceinline__ unsigned long long global_thread() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

extern "C" __global__ void cpp_stress(unsigned lines, unsigned width) {
    unsigned long long t = global_thread();
    for (unsigned i = 0; i < lines; i++) gpuio_printf("t=%llu i=%u%s\n", t, i, padding(t, i, width));
}

extern "C" __global__ void cpp_printf_stress(unsigned lines, unsigned width) {
    unsigned long long t = global_thread();
    for (unsigned i = 0; i < lines; i++) printf("t=%llu i=%u%s\n", t, i, padding(t, i, width));
}
