// bench_observer's CUDA C side: the same kernels as kernels-observer/src/lib.rs (four shapes,
// each plain, with a printf never taken, one per thread, one per block), built by nvcc on
// the GPU machine and run by bench_observer, which reads what this prints on stderr:
//
//   R name=<kernel> regs=<n> local=<bytes> ms=<t1>,<t2>,...
//
// one line per kernel (and `fma_floor`, the floor under a line a thread, beside `fma_thread`):
// the registers and local memory per thread (cudaFuncGetAttributes),
// and each rep's time from launch to cudaDeviceSynchronize returned (host clock, as
// bench_observer times gpuio's launch .. synchronize), after one warm-up launch. printf's
// lines go to stdout (bench_observer points it at /dev/null); its FIFO is set to hold every
// line of a launch, so that none is dropped.
//
//   observer <reps> <fma_steps,...> <shape,...> <variant,...>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define NEVER (-1e30f)

// Built with -DOBSERVER_GPUIO (nvcc -rdc=true -ptx, its PTX joined with gpuio's device
// library), the same kernels print through gpuio_printf: bench_observer's "C++ + gpuio"
// side, which loads and launches them as it does the Rust kernels (same names, same
// arguments). main() is not used there.
#ifdef OBSERVER_GPUIO
#include <gpuio/device.h>
#define PRINT gpuio_printf
#else
#define PRINT printf
#endif

// extern "C": the kernels keep their names in the PTX (bench_observer reads their sizes).
extern "C" {
__device__ __forceinline__ unsigned gtid() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ unsigned gthreads() { return gridDim.x * blockDim.x; }

__device__ __forceinline__ float chain(unsigned n) {
    float x = gtid() * 1e-6f;
    for (unsigned i = 0; i < n; i++) x = fmaf(x, 1.0001f, 0.5f);
    return x;
}
__global__ void fma_plain(unsigned n, float *out) { out[gtid()] = chain(n); }
__global__ void fma_never(unsigned n, float *out) {
    float x = chain(n);
    if (x < NEVER) PRINT("t=%u x=%f\n", gtid(), x);
    out[gtid()] = x;
}
__global__ void fma_thread(unsigned n, float *out) {
    float x = chain(n);
    PRINT("t=%u x=%f\n", gtid(), x);
    out[gtid()] = x;
}
__global__ void fma_block(unsigned n, float *out) {
    float x = chain(n);
    if (threadIdx.x == 0) PRINT("t=%u x=%f\n", gtid(), x);
    out[gtid()] = x;
}

__device__ __forceinline__ float saxpy_at(float a, const float *x, float *y, unsigned i) {
    float v = fmaf(a, x[i], y[i]);
    y[i] = v;
    return v;
}
__global__ void saxpy_plain(unsigned n, float a, const float *x, float *y) {
    for (unsigned i = gtid(); i < n; i += gthreads()) saxpy_at(a, x, y, i);
}
__global__ void saxpy_never(unsigned n, float a, const float *x, float *y) {
    for (unsigned i = gtid(); i < n; i += gthreads()) {
        float v = saxpy_at(a, x, y, i);
        if (v < NEVER) PRINT("t=%u x=%f\n", i, v);
    }
}
__global__ void saxpy_thread(unsigned n, float a, const float *x, float *y) {
    float last = 0;
    for (unsigned i = gtid(); i < n; i += gthreads()) last = saxpy_at(a, x, y, i);
    PRINT("t=%u x=%f\n", gtid(), last);
}
__global__ void saxpy_block(unsigned n, float a, const float *x, float *y) {
    float last = 0;
    for (unsigned i = gtid(); i < n; i += gthreads()) last = saxpy_at(a, x, y, i);
    if (threadIdx.x == 0) PRINT("t=%u x=%f\n", gtid(), last);
}

__device__ __forceinline__ float partial_sum(unsigned n, const float *x) {
    float s = 0;
    for (unsigned i = gtid(); i < n; i += gthreads()) s += x[i];
    return s;
}
__device__ __forceinline__ float block_sum(float s) {
    extern __shared__ float shared[];
    unsigned t = threadIdx.x;
    shared[t] = s;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) shared[t] += shared[t + half];
        __syncthreads();
    }
    return shared[0];
}
__global__ void reduce_plain(unsigned n, const float *x, float *out) {
    float s = block_sum(partial_sum(n, x));
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
__global__ void reduce_never(unsigned n, const float *x, float *out) {
    float p = partial_sum(n, x);
    if (p < NEVER) PRINT("t=%u x=%f\n", gtid(), p);
    float s = block_sum(p);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
__global__ void reduce_thread(unsigned n, const float *x, float *out) {
    float p = partial_sum(n, x);
    float s = block_sum(p);
    PRINT("t=%u x=%f\n", gtid(), p);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
__global__ void reduce_block(unsigned n, const float *x, float *out) {
    float s = block_sum(partial_sum(n, x));
    if (threadIdx.x == 0) {
        PRINT("t=%u x=%f\n", gtid(), s);
        out[blockIdx.x] = s;
    }
}

struct Tile {
    float v[4][4];
    unsigned at;
};
__device__ __forceinline__ Tile tile(unsigned n, const float *a, const float *b) {
    unsigned t = gtid(), row = t / (n / 4) * 4, col = t % (n / 4) * 4;
    Tile r = {};
    for (unsigned k = 0; k < n; k++) {
        float av[4], bv[4];
        for (int i = 0; i < 4; i++) { av[i] = a[(row + i) * n + k]; bv[i] = b[k * n + col + i]; }
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) r.v[i][j] = fmaf(av[i], bv[j], r.v[i][j]);
    }
    r.at = row * n + col;
    return r;
}
__device__ __forceinline__ void store_tile(unsigned n, float *c, const Tile &r) {
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) c[r.at + i * n + j] = r.v[i][j];
}
// The tile's four kernels, named PREFIX_plain .. PREFIX_block, each declared with BOUNDS
// (nothing, or `__launch_bounds__(256)` for `tile256`).
#define TILE_KERNELS(PREFIX, BOUNDS)                                                                  \
    __global__ void BOUNDS PREFIX##_plain(unsigned n, const float *a, const float *b, float *c) {     \
        store_tile(n, c, tile(n, a, b));                                                              \
    }                                                                                                 \
    __global__ void BOUNDS PREFIX##_never(unsigned n, const float *a, const float *b, float *c) {     \
        Tile r = tile(n, a, b);                                                                       \
        if (r.v[0][0] < NEVER) PRINT("t=%u x=%f\n", gtid(), r.v[0][0]);                              \
        store_tile(n, c, r);                                                                          \
    }                                                                                                 \
    __global__ void BOUNDS PREFIX##_thread(unsigned n, const float *a, const float *b, float *c) {    \
        Tile r = tile(n, a, b);                                                                       \
        PRINT("t=%u x=%f\n", gtid(), r.v[0][0]);                                                      \
        store_tile(n, c, r);                                                                          \
    }                                                                                                 \
    __global__ void BOUNDS PREFIX##_block(unsigned n, const float *a, const float *b, float *c) {     \
        Tile r = tile(n, a, b);                                                                       \
        if (threadIdx.x == 0) PRINT("t=%u x=%f\n", gtid(), r.v[0][0]);                               \
        store_tile(n, c, r);                                                                          \
    }
TILE_KERNELS(tile, )
TILE_KERNELS(tile256, __launch_bounds__(256))

// The floor under any print of a line a thread, in the FMA shape: the chain, then each
// thread's FLOOR_BYTES (gpuio's lines there are 20.4 bytes on average at 20,000 steps, 24.6
// at 200,000) stored raw into mapped host memory, with no formatting and no protocol, in
// the fewest PCIe transactions: staged in shared memory, then stored by the block in
// contiguous 16-byte units. What it costs over fma_plain is the cost of moving those bytes
// to the host while the kernel runs, which no such print avoids. Blocks of FLOOR_THREADS.
#define FLOOR_BYTES 20
#define FLOOR_THREADS 256
__global__ void fma_floor(unsigned n, float *out, uint4 *host) {
    __shared__ uint4 staged[FLOOR_THREADS * FLOOR_BYTES / 16];
    float x = chain(n);
    unsigned t = threadIdx.x, *words = (unsigned *)staged + t * (FLOOR_BYTES / 4);
    unsigned line[FLOOR_BYTES / 4] = {gtid(), __float_as_uint(x), t, blockIdx.x, 0x0a0a0a0au};
    for (int i = 0; i < FLOOR_BYTES / 4; i++) words[i] = line[i];
    __syncthreads();
    uint4 *dst = host + (size_t)blockIdx.x * (FLOOR_THREADS * FLOOR_BYTES / 16);
    for (unsigned u = t; u < FLOOR_THREADS * FLOOR_BYTES / 16; u += FLOOR_THREADS) dst[u] = staged[u];
    out[gtid()] = x;
}

__global__ void observer_fill(unsigned n, float *x, float *y) {
    for (unsigned i = gtid(); i < n; i += gthreads()) {
        x[i] = (i % 1000) * 1e-3f;
        y[i] = (i % 777) * 1e-3f;
    }
}

__global__ void observer_empty() {}
}  // extern "C"

static void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "E %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static std::vector<std::string> split(const char *s) {
    std::vector<std::string> v;
    std::string cur;
    for (; *s; s++) {
        if (*s == ',') { v.push_back(cur); cur.clear(); } else cur += *s;
    }
    v.push_back(cur);
    return v;
}

// The launch shapes: bench_observer's (its module docs).
static const unsigned BLOCKS = 1024, THREADS = 256, ELEMS = 1u << 26, TILE_N = 1024;

template <typename F>
static void time_kernel(const std::string &name, const void *fn, int reps, F launch) {
    cudaFuncAttributes attr;
    check(cudaFuncGetAttributes(&attr, fn), "cudaFuncGetAttributes");
    launch();
    check(cudaDeviceSynchronize(), name.c_str());
    std::string ms;
    for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        launch();
        check(cudaDeviceSynchronize(), name.c_str());
        fflush(stdout);
        double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        char buf[32];
        snprintf(buf, sizeof buf, "%s%.4f", r ? "," : "", d);
        ms += buf;
    }
    fprintf(stderr, "R name=%s regs=%d local=%zu ms=%s\n", name.c_str(), attr.numRegs, attr.localSizeBytes, ms.c_str());
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: observer <reps> <fma_steps,...> <shape,...> <variant,...>\n");
        return 2;
    }
    int reps = atoi(argv[1]);
    auto steps = split(argv[2]), shapes = split(argv[3]), variants = split(argv[4]);
    // Every thread's line of the largest launch, about 24 bytes of arguments and header each.
    check(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, (size_t)256 << 20), "cudaDeviceSetLimit");
    static_assert(THREADS == FLOOR_THREADS, "fma_floor stages one block of THREADS");
    uint4 *floor_host, *floor_dev;
    check(cudaHostAlloc((void **)&floor_host, (size_t)BLOCKS * THREADS * FLOOR_BYTES, cudaHostAllocMapped),
          "cudaHostAlloc");
    check(cudaHostGetDevicePointer((void **)&floor_dev, floor_host, 0), "cudaHostGetDevicePointer");
    float *x, *y, *out, *c;
    check(cudaMalloc(&x, ELEMS * 4), "cudaMalloc");
    check(cudaMalloc(&y, ELEMS * 4), "cudaMalloc");
    check(cudaMalloc(&out, BLOCKS * THREADS * 4), "cudaMalloc");
    check(cudaMalloc(&c, TILE_N * TILE_N * 4), "cudaMalloc");
    observer_fill<<<BLOCKS, THREADS>>>(ELEMS, x, y);
    check(cudaDeviceSynchronize(), "observer_fill");
    // What launch .. synchronize costs with no work: bench_observer subtracts it.
    time_kernel("observer_empty", (void *)observer_empty, 4 * reps, [&] { observer_empty<<<BLOCKS, THREADS>>>(); });
    const void *fma_k[] = {(void *)fma_plain, (void *)fma_never, (void *)fma_thread, (void *)fma_block};
    typedef void (*Fma)(unsigned, float *);
    Fma fma_f[] = {fma_plain, fma_never, fma_thread, fma_block};
    typedef void (*Sax)(unsigned, float, const float *, float *);
    Sax sax_f[] = {saxpy_plain, saxpy_never, saxpy_thread, saxpy_block};
    typedef void (*Red)(unsigned, const float *, float *);
    Red red_f[] = {reduce_plain, reduce_never, reduce_thread, reduce_block};
    typedef void (*Til)(unsigned, const float *, const float *, float *);
    Til til_f[] = {tile_plain, tile_never, tile_thread, tile_block};
    Til til256_f[] = {tile256_plain, tile256_never, tile256_thread, tile256_block};
    const char *vnames[] = {"plain", "never", "thread", "block"};
    for (auto &shape : shapes) {
        for (auto &v : variants) {
            int k = -1;
            for (int i = 0; i < 4; i++)
                if (v == vnames[i]) k = i;
            if (k < 0) { fprintf(stderr, "E unknown variant %s\n", v.c_str()); return 2; }
            std::string name = shape + "_" + v;
            if (shape == "fma") {
                for (auto &s : steps) {
                    unsigned n = atoi(s.c_str());
                    time_kernel(name + "@" + s, fma_k[k], reps, [&] { fma_f[k]<<<BLOCKS, THREADS>>>(n, out); });
                    if (v == "thread")
                        time_kernel("fma_floor@" + s, (void *)fma_floor, reps,
                                    [&] { fma_floor<<<BLOCKS, THREADS>>>(n, out, floor_dev); });
                }
            } else if (shape == "saxpy") {
                time_kernel(name, (void *)sax_f[k], reps, [&] { sax_f[k]<<<BLOCKS, THREADS>>>(ELEMS, 1.0001f, x, y); });
            } else if (shape == "reduce") {
                time_kernel(name, (void *)red_f[k], reps,
                            [&] { red_f[k]<<<BLOCKS, THREADS, THREADS * 4>>>(ELEMS, x, out); });
            } else if (shape == "tile" || shape == "tile256") {
                Til f = shape == "tile" ? til_f[k] : til256_f[k];
                unsigned blocks = TILE_N / 4 * (TILE_N / 4) / THREADS;
                time_kernel(name, (void *)f, reps, [&] { f<<<blocks, THREADS>>>(TILE_N, x, y, c); });
            } else {
                fprintf(stderr, "E unknown shape %s\n", shape.c_str());
                return 2;
            }
        }
    }
    return 0;
}
