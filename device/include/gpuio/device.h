/*
 * gpuio's device runtime for kernels written in CUDA C++, HIP or C: printf and file I/O
 * from GPU threads, through the same rings as gpuio's Rust kernels (docs/PROTOCOL.md).
 *
 * Each function is the Rust device runtime's C ABI (gpuio-device's `c-abi` feature,
 * device/src/c_abi/): a print is one record on the runtime's stdout, whole, each thread's
 * prints in its order, formatted on the device; the file calls are io_uring requests under
 * the runtime's sandbox. Where POSIX returns -1 and sets errno, these return -errno (a GPU
 * thread has no errno).
 *
 * In CUDA C++ and HIP the functions are __device__. On the CPU backend (a C or C++ kernel
 * launched with gpuio_cpu_launch, gpuio.h) they are ordinary functions of libgpuio.
 *
 *     #include <gpuio/device.h>
 *     __global__ void k(float x) { gpuio_printf("thread %d: %.3f\n", (int)threadIdx.x, x); }
 */
#ifndef GPUIO_DEVICE_H
#define GPUIO_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define GPUIO_DEVICE __device__
#else
#define GPUIO_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One printf argument as gpuio_printf_args takes it: `kind` says how `bits` holds it. */
typedef struct gpuio_printf_arg {
    uint32_t kind;
    uint64_t bits;
} gpuio_printf_arg;

/* A signed integer, sign-extended to 64 bits. */
#define GPUIO_PRINTF_INT 0u
/* An unsigned integer, zero-extended to 64 bits. */
#define GPUIO_PRINTF_UINT 1u
/* A double (a float promoted, as C's varargs promote it): its bits. */
#define GPUIO_PRINTF_DOUBLE 2u
/* A pointer: a %s string (NUL-terminated) or a %p address. */
#define GPUIO_PRINTF_PTR 3u

/*
 * Prints `format` with its `nargs` arguments to the runtime's stdout as C's printf does,
 * as one record. Conversions d i u x X o c s p f F e E g G a A %, the flags - + space # 0,
 * a width and a precision (digits or *, at most 4096), the lengths hh h l ll z j t.
 * Returns the bytes printed; -1 where the format is not taken (%n, L, a width or precision
 * over 4096, an argument missing or of another kind), having printed nothing of it and a
 * line on the runtime's stderr that says why. Prints are text: bytes that are not UTF-8
 * (in the format, a %s or a %c) print as U+FFFD.
 * C++ code calls gpuio_printf below, which packs the arguments.
 */
GPUIO_DEVICE int gpuio_printf_args(const char *format, const gpuio_printf_arg *args, uint32_t nargs);

/* Prints `s` and a newline to the runtime's stdout, one line. Returns the bytes printed. */
GPUIO_DEVICE int gpuio_puts(const char *s);

/* Writes `len` bytes to the runtime's stdout (fd 1) or stderr (2) as one print: `len`, or
 * -EBADF for any other fd (files take gpuio_pwrite). */
GPUIO_DEVICE ptrdiff_t gpuio_write(int fd, const void *buf, size_t len);

/* open(2): the descriptor, or -errno. */
GPUIO_DEVICE int gpuio_open(const char *path, int flags, unsigned int mode);

/* pwrite(2): the bytes written, or -errno. */
GPUIO_DEVICE ptrdiff_t gpuio_pwrite(int fd, const void *buf, size_t len, int64_t offset);

/* pread(2): the bytes read (0 at the end of the file), or -errno. */
GPUIO_DEVICE ptrdiff_t gpuio_pread(int fd, void *buf, size_t len, int64_t offset);

/* fsync(2): 0, or -errno. */
GPUIO_DEVICE int gpuio_fsync(int fd);

/* close(2): 0, or -errno. */
GPUIO_DEVICE int gpuio_close(int fd);

#ifdef __cplusplus
}

/* C++: printf's arguments, each packed as the type C's varargs would pass it. A long
 * double or a member pointer does not compile (the format could not take it). C++'s NULL
 * is an integer: pass nullptr (or a typed pointer) to a %p or %s. */
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(bool v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(char v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(signed char v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(short v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(int v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(long v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(long long v) { return gpuio_printf_arg{GPUIO_PRINTF_INT, (uint64_t)(int64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(unsigned char v) { return gpuio_printf_arg{GPUIO_PRINTF_UINT, (uint64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(unsigned short v) { return gpuio_printf_arg{GPUIO_PRINTF_UINT, (uint64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(unsigned int v) { return gpuio_printf_arg{GPUIO_PRINTF_UINT, (uint64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(unsigned long v) { return gpuio_printf_arg{GPUIO_PRINTF_UINT, (uint64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(unsigned long long v) { return gpuio_printf_arg{GPUIO_PRINTF_UINT, (uint64_t)v}; }
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(float v) {
    double d = v;
    uint64_t bits;
    __builtin_memcpy(&bits, &d, sizeof bits);
    return gpuio_printf_arg{GPUIO_PRINTF_DOUBLE, bits};
}
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(double v) {
    uint64_t bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    return gpuio_printf_arg{GPUIO_PRINTF_DOUBLE, bits};
}
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(decltype(nullptr)) { return gpuio_printf_arg{GPUIO_PRINTF_PTR, 0}; }
template <typename T, typename C>
GPUIO_DEVICE gpuio_printf_arg gpuio_pack(T C::*) = delete;
template <typename T>
GPUIO_DEVICE inline gpuio_printf_arg gpuio_pack(T *p) {
    return gpuio_printf_arg{GPUIO_PRINTF_PTR, (uint64_t)(uintptr_t)p};
}

/* printf from a kernel: formats on the device, prints one record to the runtime's stdout
 * (see gpuio_printf_args). */
template <typename... Args>
GPUIO_DEVICE inline int gpuio_printf(const char *format, Args... args) {
    const gpuio_printf_arg packed[sizeof...(Args) + 1] = {gpuio_pack(args)..., gpuio_printf_arg{0, 0}};
    return gpuio_printf_args(format, packed, (uint32_t)sizeof...(Args));
}
#endif /* __cplusplus */

#endif /* GPUIO_DEVICE_H */
