/*
 * gpuio.h: the C API of gpuio (C99 and C++ hosts).
 *
 * gpuio lets kernels do I/O themselves: a kernel's print writes io_uring submission
 * entries straight into host memory, and the Linux kernel's SQPOLL thread consumes them.
 * This header lets a C or C++ host create a runtime, load or attach GPU code objects,
 * launch kernels and collect their I/O errors. On the CPU backend, C functions run as
 * "GPU threads" on host threads and print through the very same ring protocol.
 *
 * Build: `cargo build --release -p gpuio-capi` makes target/release/libgpuio.so,
 * target/release/libgpuio.a and target/release/gpuio.pc, so that
 *
 *     PKG_CONFIG_PATH=target/release cc host.c $(pkg-config --cflags --libs gpuio)
 *
 * builds a host against the shared library (found at run time through an rpath), and
 *
 *     cc host.c -Ihost/capi/include target/release/libgpuio.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
 *
 * links it statically (gpuio.pc's Libs.private lists those system libraries).
 *
 * Conventions:
 *  - Every function returns a gpuio_status (GPUIO_OK is 0); gpuio_last_error() then
 *    describes the call in words. No call crashes on NULL or stale handles: it returns
 *    an error. (A handle that was never returned by gpuio is rejected too.)
 *  - Handles are opaque and thread-safe: any thread may use a runtime or a module, also
 *    concurrently. A destroyed handle is never reused, so using it (or destroying it
 *    again) gives GPUIO_ERROR_INVALID_HANDLE.
 *  - Strings (names, paths) are NUL-terminated; kernel and symbol names must be UTF-8.
 *  - Rust panics never cross this boundary: they become GPUIO_ERROR_INTERNAL.
 *
 * Typical use on the CPU backend:
 *
 *     static void kernel(const gpuio_thread *t, void *user) {
 *         gpuio_printf("hello from thread %llu\n", (unsigned long long)t->global_idx);
 *     }
 *     ...
 *     gpuio_runtime_options o;
 *     gpuio_runtime_options_init(&o);
 *     o.backend = GPUIO_BACKEND_CPU;
 *     gpuio_runtime *rt;
 *     if (gpuio_runtime_create(&o, &rt) != GPUIO_OK) { fprintf(stderr, "%s\n", gpuio_last_error()); ... }
 *     gpuio_cpu_launch(rt, 4, 64, kernel, NULL);
 *     gpuio_sync_report report;
 *     gpuio_status s = gpuio_synchronize(rt, &report);  // every line is out, or says what was lost
 *     gpuio_runtime_destroy(rt);
 *
 * On a CUDA GPU: gpuio_module_load_file(rt, "kernels.ptx", &m), then
 * gpuio_module_launch(m, "hello", grid, block, args, nargs), then gpuio_synchronize.
 */
#ifndef GPUIO_H
#define GPUIO_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* Status                                                                               */

/** What a call did. GPUIO_OK is 0; every other value is an error. */
typedef enum gpuio_status {
    /** Success. */
    GPUIO_OK = 0,
    /** A NULL pointer, a non-UTF-8 name, a zero grid or block, uninitialised options, ... */
    GPUIO_ERROR_INVALID_ARGUMENT = 1,
    /** The handle is NULL, was destroyed, or is not the kind of handle the call takes. */
    GPUIO_ERROR_INVALID_HANDLE = 2,
    /** An option is out of range (log size not a power of two, too many CPU threads, ...). */
    GPUIO_ERROR_CONFIG = 3,
    /** The backend asked for cannot run here, or the runtime's backend cannot do this. */
    GPUIO_ERROR_BACKEND_UNAVAILABLE = 4,
    /** io_uring cannot be used on this machine (the message names the cause). */
    GPUIO_ERROR_URING_UNAVAILABLE = 5,
    /** A system call failed. */
    GPUIO_ERROR_OS = 6,
    /** A GPU driver call failed (an invalid code object, say). */
    GPUIO_ERROR_DRIVER = 7,
    /** The code object has no such kernel, or no `gpuio_context` global. */
    GPUIO_ERROR_NOT_FOUND = 8,
    /** A kernel faulted. */
    GPUIO_ERROR_KERNEL = 9,
    /** Fire-and-forget prints failed (a closed fd, ENOSPC, ...); the gpuio_sync_report
     *  says which outputs lost how much. Nothing hung, everything else went out. */
    GPUIO_ERROR_PRINT = 10,
    /** The call is not allowed where it was made: gpuio_print outside a kernel, or a
     *  runtime call (launch, synchronize, destroy) from inside a CPU kernel. */
    GPUIO_ERROR_WRONG_CONTEXT = 11,
    /** A bug in gpuio (a Rust panic, caught at the boundary); the message says where. */
    GPUIO_ERROR_INTERNAL = 12,
    /** gpuio_synchronize (or gpuio_runtime_destroy) gave up: nothing moved for the hang
     *  timeout (gpuio_runtime_options.hang_timeout_ms, or GPUIO_HANG_TIMEOUT). The message
     *  names what is outstanding. The kernels may still be running. */
    GPUIO_ERROR_HANG = 13
} gpuio_status;

/** The name of a status ("GPUIO_ERROR_NOT_FOUND"), or "GPUIO_STATUS_UNKNOWN". Never NULL. */
const char *gpuio_status_name(gpuio_status status);

/**
 * What the calling thread's latest gpuio call did, in words: "" after a success, else
 * the error message. Never NULL. The string stays valid until this thread's next gpuio
 * call (copy it to keep it). gpuio_last_error and gpuio_status_name themselves leave it
 * as it is.
 */
const char *gpuio_last_error(void);

/* ------------------------------------------------------------------------------------ */
/* Runtime                                                                              */

/** A runtime: its rings (io_urings, each with its SQPOLL thread; on the CPU backend, by
 *  default, performed by the kernel threads themselves), the print logs, a backend. */
typedef struct gpuio_runtime gpuio_runtime;

/** Where kernels run. */
typedef enum gpuio_backend {
    /** GPUIO_BACKEND (environment) if set, else a CUDA GPU, an AMD GPU, the CPU. */
    GPUIO_BACKEND_AUTO = 0,
    /** Host threads run kernels (gpuio_cpu_launch). */
    GPUIO_BACKEND_CPU = 1,
    /** An NVIDIA GPU through the CUDA driver (loaded at run time). */
    GPUIO_BACKEND_CUDA = 2,
    /** An AMD GPU through the HSA runtime (libhsa-runtime64.so.1, loaded at run time). */
    GPUIO_BACKEND_HSA = 3
} gpuio_backend;

/** Which io_uring requests the runtime's ring accepts from device code. */
typedef enum gpuio_sandbox {
    /** Writes to the registered stdout/stderr only: what printing needs (the default). */
    GPUIO_SANDBOX_PRINT_ONLY = 0,
    /** Device file I/O: READ, WRITE, OPENAT, CLOSE, FSYNC on any file descriptor. */
    GPUIO_SANDBOX_FILE_IO = 1,
    /** No restrictions. */
    GPUIO_SANDBOX_OFF = 2
} gpuio_sandbox;

/**
 * Runtime settings. Fill with gpuio_runtime_options_init first, then change fields:
 * a struct that was not initialised is rejected (struct_size). New fields are only ever
 * appended: a host built against an older gpuio.h passes its smaller struct_size, and the
 * fields it lacks take their defaults.
 */
typedef struct gpuio_runtime_options {
    /** sizeof(gpuio_runtime_options); set by gpuio_runtime_options_init. */
    uint32_t struct_size;
    /** A gpuio_backend; default GPUIO_BACKEND_AUTO. */
    int32_t backend;
    /** Submission queue entries, a power of two up to 32768; 0: default (1024 on a GPU,
     *  256 on the CPU backend). */
    uint32_t sq_entries;
    /** Completion queue entries, a power of two >= sq_entries, up to 65536; 0: twice sq_entries. */
    uint32_t cq_entries;
    /** Bytes of log per output, a power of two from 64 to 2^40, for both; 0: default (4 MiB
     *  each on the CPU; on GPUs 32 MiB for stdout, 8 MiB for stderr). Lines longer than the
     *  log still come out whole. */
    uint64_t log_bytes;
    /** Where gpuio_print (device println!) goes; default 1. Must be >= 0. */
    int32_t stdout_fd;
    /** Where gpuio_eprint (device eprintln!) goes; default 2. Must be >= 0. */
    int32_t stderr_fd;
    /** Writes in flight per regular-file output, a power of two up to 65536; 0: default (16). */
    uint32_t max_flights;
    /** Milliseconds SQPOLL spins idle before it sleeps; 0: default (50). */
    uint32_t sq_thread_idle_ms;
    /** Per-thread stack of GPU kernels in bytes; 0: default (8 KiB). */
    uint64_t gpu_stack_bytes;
    /** Bytes of host memory staging device file I/O, a power of two; 0: default (16 MiB). */
    uint64_t arena_bytes;
    /** Bytes per arena block (the largest staged piece), a power of two from 4096; 0:
     *  default (64 KiB). */
    uint64_t arena_block_bytes;
    /** A gpuio_sandbox; default GPUIO_SANDBOX_PRINT_ONLY (device file I/O is then refused
     *  with EACCES and reported by gpuio_synchronize). */
    int32_t sandbox;
    /** Milliseconds without progress after which gpuio_synchronize gives up with
     *  GPUIO_ERROR_HANG; 0: default (the GPUIO_HANG_TIMEOUT environment variable, in
     *  seconds, else none). Progress is anything the runtime can observe move: the rings'
     *  heads and tails, on the CPU backend also the outputs' positions and the kernel
     *  threads still running, a GPU kernel finishing. So a kernel that computes longer than
     *  this without any I/O counts as hung too. Without a timeout, gpuio_synchronize waits
     *  for as long as it takes, and says so on stderr after 30 s without progress, then
     *  every 5 minutes (GPUIO_QUIET silences these warnings). */
    uint64_t hang_timeout_ms;
    /** io_uring rings, each with its own SQPOLL thread (on a GPU; GPUIO_SQPOLL), 1 to 8; 0: default (the
     *  GPUIO_RINGS environment variable, else on a GPU one per four free cores near it,
     *  1 to 4, and 1 on the CPU backend). A block's device requests go to ring
     *  block_idx % rings; prints all go through ring 0. With several, the SQPOLL threads
     *  are bound to CPUs near the GPU (GPUIO_SQPOLL_CPUS, a list such as 2-5, chooses). */
    uint32_t rings;
    /** Must be 0 (it keeps the struct's size a multiple of 8 with no padding, so that a
     *  later field never lands in bytes an older caller left unset). */
    uint32_t reserved;
    /** The GPU to run kernels on, numbered from 0 as the backend's driver lists them (CUDA
     *  honours CUDA_VISIBLE_DEVICES); -1 (what gpuio_runtime_options_init sets): default
     *  (the GPUIO_GPU environment variable, else the first). A process drives several GPUs
     *  with a runtime each. A GPU named here that cannot be opened is GPUIO_ERROR_CONFIG or
     *  GPUIO_ERROR_BACKEND_UNAVAILABLE, never a fall back to the CPU; naming one with
     *  GPUIO_BACKEND_CPU is GPUIO_ERROR_CONFIG. */
    int32_t gpu;
    /** Must be 0 (as reserved). */
    uint32_t reserved2;
} gpuio_runtime_options;

/** Fills `options` with the defaults (and struct_size). */
gpuio_status gpuio_runtime_options_init(gpuio_runtime_options *options);

/**
 * Creates a runtime. `options` may be NULL (all defaults). On success `*out` is the
 * runtime; on failure it is NULL and the status says why (GPUIO_ERROR_BACKEND_UNAVAILABLE
 * names the cause when a forced backend cannot run here).
 */
gpuio_status gpuio_runtime_create(const gpuio_runtime_options *options, gpuio_runtime **out);

/** The backend the runtime's kernels run on (never GPUIO_BACKEND_AUTO). */
gpuio_status gpuio_runtime_backend(gpuio_runtime *rt, gpuio_backend *out);

/** Failed writes to one file descriptor, and lines whose Display failed, since the
 *  previous report. */
typedef struct gpuio_output_errors {
    /** The file descriptor. */
    int32_t fd;
    /** Write requests that failed. */
    uint32_t failed_writes;
    /** The errno of the latest failure. */
    int32_t last_errno;
    /** Lines whose Rust Display returned an error: cut there and marked
     *  "<gpuio: formatter error>" (written, not lost). */
    uint32_t format_errors;
    /** Bytes not written. */
    uint64_t lost_bytes;
    /** Lines (newlines) among them. */
    uint64_t lost_lines;
} gpuio_output_errors;

/** The most outputs a gpuio_sync_report lists. */
#define GPUIO_MAX_OUTPUTS 8

/** What gpuio_synchronize found: the outputs whose prints failed. */
typedef struct gpuio_sync_report {
    /** Entries used in `outputs` (0 when nothing was lost). */
    uint32_t num_outputs;
    /** One entry per output that lost writes. */
    gpuio_output_errors outputs[GPUIO_MAX_OUTPUTS];
} gpuio_sync_report;

/**
 * Waits until every kernel launched so far finished and every request they submitted
 * completed: then every printed line is out. Reports kernel failures
 * (GPUIO_ERROR_KERNEL) and failed prints since the previous report (GPUIO_ERROR_PRINT;
 * `report`, which may be NULL, lists them, and is zeroed otherwise).
 * Not from inside a CPU kernel (GPUIO_ERROR_WRONG_CONTEXT).
 *
 * If nothing moves for the hang timeout (hang_timeout_ms), it returns GPUIO_ERROR_HANG;
 * gpuio_last_error names what is outstanding (kernel threads still running, the rings'
 * heads and tails, each output's positions). The kernels stay launched: a later
 * gpuio_synchronize waits for them again, and succeeds if they finish.
 */
gpuio_status gpuio_synchronize(gpuio_runtime *rt, gpuio_sync_report *report);

/**
 * Synchronizes, then destroys the runtime and every module handle of it. Returns the
 * status of that last synchronize (the runtime is destroyed either way, unless the call
 * is refused: a stale handle, or a call from inside a CPU kernel). If that synchronize
 * gives up (GPUIO_ERROR_HANG), the handles are destroyed but the runtime's memory, ring
 * and modules are leaked, not freed: the kernels may still be using them.
 */
gpuio_status gpuio_runtime_destroy(gpuio_runtime *rt);

/* ------------------------------------------------------------------------------------ */
/* The CPU backend: C kernels on host threads                                           */

/** The ids of one thread of a launch (a 1-D grid of 1-D blocks, as on a GPU). */
typedef struct gpuio_thread {
    /** Index of the thread in its block. */
    uint32_t thread_idx;
    /** Index of the block in the grid. */
    uint32_t block_idx;
    /** Threads per block. */
    uint32_t block_dim;
    /** Blocks in the grid. */
    uint32_t grid_dim;
    /** block_idx * block_dim + thread_idx. */
    uint64_t global_idx;
} gpuio_thread;

/**
 * A kernel for the CPU backend: runs once per thread of the launch, each on its own host
 * thread, with `user` as given to gpuio_cpu_launch. It may call gpuio_print and friends.
 * It must return normally: no C++ exception or longjmp may leave it (an exception that
 * does aborts the process).
 */
typedef void (*gpuio_cpu_kernel)(const gpuio_thread *thread, void *user);

/**
 * Runs `kernel` on `grid` blocks of `block` threads (at most 65536 in all) of a CPU-backend
 * runtime, one host thread each. Returns at once; gpuio_synchronize waits for them.
 * `user` is shared by all threads, and must stay valid until gpuio_synchronize returns.
 * On a GPU runtime: GPUIO_ERROR_BACKEND_UNAVAILABLE.
 */
gpuio_status gpuio_cpu_launch(gpuio_runtime *rt, uint32_t grid, uint32_t block, gpuio_cpu_kernel kernel,
                              void *user);

/**
 * Prints `len` bytes to the runtime's stdout, from inside a CPU kernel. The bytes of one
 * call come out exactly once, contiguous and in the calling thread's order; so a call
 * that prints whole lines ("...\n") prints whole lines, never torn by other threads.
 * Any bytes may be printed, UTF-8 or not. Outside a kernel: GPUIO_ERROR_WRONG_CONTEXT,
 * nothing printed.
 */
gpuio_status gpuio_print(const char *bytes, size_t len);

/** Like gpuio_print, to the runtime's stderr. */
gpuio_status gpuio_eprint(const char *bytes, size_t len);

/** Formats like vprintf, then prints the result with one gpuio_print (or gpuio_eprint). */
static inline gpuio_status gpuio_vprintf_to(int to_stderr, const char *format, va_list args) {
    char stack[256];
    char *text = stack;
    gpuio_status status;
    va_list again;
    int n;
    va_copy(again, args);
    n = vsnprintf(stack, sizeof stack, format, args);
    if (n < 0) {
        va_end(again);
        return GPUIO_ERROR_INVALID_ARGUMENT;
    }
    if ((size_t)n >= sizeof stack) {
        text = (char *)malloc((size_t)n + 1);
        if (text == NULL) {
            va_end(again);
            return GPUIO_ERROR_OS;
        }
        vsnprintf(text, (size_t)n + 1, format, again);
    }
    va_end(again);
    status = to_stderr ? gpuio_eprint(text, (size_t)n) : gpuio_print(text, (size_t)n);
    if (text != stack) {
        free(text);
    }
    return status;
}

#if defined(__GNUC__) || defined(__clang__)
#define GPUIO_PRINTF_FORMAT(f, a) __attribute__((format(printf, f, a)))
#else
#define GPUIO_PRINTF_FORMAT(f, a)
#endif

/** printf to the runtime's stdout, from inside a CPU kernel: one gpuio_print call. */
static inline GPUIO_PRINTF_FORMAT(1, 2) gpuio_status gpuio_printf(const char *format, ...) {
    gpuio_status status;
    va_list args;
    va_start(args, format);
    status = gpuio_vprintf_to(0, format, args);
    va_end(args);
    return status;
}

/** printf to the runtime's stderr, from inside a CPU kernel: one gpuio_eprint call. */
static inline GPUIO_PRINTF_FORMAT(1, 2) gpuio_status gpuio_eprintf(const char *format, ...) {
    gpuio_status status;
    va_list args;
    va_start(args, format);
    status = gpuio_vprintf_to(1, format, args);
    va_end(args);
    return status;
}

/* ------------------------------------------------------------------------------------ */
/* GPU code objects                                                                     */

/** A code object loaded into (or attached to) a runtime, with its context set. */
typedef struct gpuio_module gpuio_module;

/**
 * Loads a code object from memory and points its `gpuio_context` at the runtime.
 * CUDA: PTX text (`size` bytes; a trailing NUL is allowed, not needed). HSA: an AMDGPU ELF code
 * object (.hsaco) built for the runtime's GPU. On the CPU backend:
 * GPUIO_ERROR_BACKEND_UNAVAILABLE. The code object must link gpuio's device crate
 * (otherwise GPUIO_ERROR_NOT_FOUND: no `gpuio_context`).
 */
gpuio_status gpuio_module_load_data(gpuio_runtime *rt, const void *image, size_t size, gpuio_module **out);

/** Like gpuio_module_load_data, with the code object read from the file at `path`. */
gpuio_status gpuio_module_load_file(gpuio_runtime *rt, const char *path, gpuio_module **out);

/**
 * Joins PTX modules into one text, for a CUDA C++ kernel: gpuio's device library (the C ABI
 * of gpuio/device.h) first, then the kernel's PTX from `nvcc -rdc=true -ptx -arch=sm_NN`.
 * `modules` holds `count` NUL-terminated PTX texts. The joined text (NUL-terminated) goes
 * to `buf`, which holds `capacity` bytes; `len` receives the bytes it needs, NUL included.
 * With `buf` NULL and `capacity` 0 only `len` is set (call again with a buffer that size).
 * A buffer too small (or `buf` NULL with a capacity): GPUIO_ERROR_INVALID_ARGUMENT, nothing
 * written but `len`. On any other error `len` is 0: no modules (`count` 0), `modules` or an
 * entry NULL, or a text that is not UTF-8 are GPUIO_ERROR_INVALID_ARGUMENT. (`modules` is
 * `const char *const *`: an array of `char *` passes with a cast.)
 * Refused with GPUIO_ERROR_CONFIG (gpuio_last_error() says which and why): modules built
 * for different targets, a name defined twice (one C++ module at a time: nvcc names each
 * one's strings alike), a module that uses a name a later one defines (the library goes
 * first), PTX with debug info (build without -G and -lineinfo).
 * The text loads with gpuio_module_load_data, or with the host's own cuModuleLoadData and
 * then gpuio_attach_cuda_module.
 */
gpuio_status gpuio_link_ptx(const char *const *modules, size_t count, char *buf, size_t capacity, size_t *len);

/**
 * gpuio_link_ptx's join of `count` PTX texts, loaded as gpuio_module_load_data loads one.
 * CUDA only: a runtime on another backend is GPUIO_ERROR_BACKEND_UNAVAILABLE before anything
 * is joined. `*out` is NULL after any failure.
 */
gpuio_status gpuio_module_load_linked(gpuio_runtime *rt, const char *const *modules, size_t count,
                                      gpuio_module **out);

/** How a gpuio_arg's value is passed. */
typedef enum gpuio_arg_kind {
    /** A 32-bit integer (int32_t or uint32_t). */
    GPUIO_ARG_U32 = 1,
    /** A 64-bit integer, or a device pointer. */
    GPUIO_ARG_U64 = 2,
    /** A float. */
    GPUIO_ARG_F32 = 3,
    /** A double. */
    GPUIO_ARG_F64 = 4
} gpuio_arg_kind;

/** One kernel argument, passed by value. Make them with gpuio_arg_u32() and friends. */
typedef struct gpuio_arg {
    /** A gpuio_arg_kind: which member of `value` is passed. */
    int32_t kind;
    /** The value. */
    union {
        uint32_t u32;
        uint64_t u64;
        float f32;
        double f64;
    } value;
} gpuio_arg;

/** A 32-bit integer argument. */
static inline gpuio_arg gpuio_arg_u32(uint32_t v) {
    gpuio_arg a;
    a.kind = GPUIO_ARG_U32;
    a.value.u64 = 0;
    a.value.u32 = v;
    return a;
}
/** A 64-bit integer (or device pointer) argument. */
static inline gpuio_arg gpuio_arg_u64(uint64_t v) {
    gpuio_arg a;
    a.kind = GPUIO_ARG_U64;
    a.value.u64 = v;
    return a;
}
/** A float argument. */
static inline gpuio_arg gpuio_arg_f32(float v) {
    gpuio_arg a;
    a.kind = GPUIO_ARG_F32;
    a.value.u64 = 0;
    a.value.f32 = v;
    return a;
}
/** A double argument. */
static inline gpuio_arg gpuio_arg_f64(double v) {
    gpuio_arg a;
    a.kind = GPUIO_ARG_F64;
    a.value.f64 = v;
    return a;
}

/**
 * Launches kernel `name` of the module on `grid` blocks of `block` threads (both >= 1),
 * asynchronously; gpuio_synchronize waits. `args` (NULL when `num_args` is 0) must match
 * the kernel's parameters in number, order and size: the driver cannot check them.
 * An unknown kernel: GPUIO_ERROR_NOT_FOUND.
 */
gpuio_status gpuio_module_launch(gpuio_module *module, const char *name, uint32_t grid, uint32_t block,
                                 const gpuio_arg *args, size_t num_args);

/**
 * Releases the module handle, at once: the handle is invalid from now on. The module is
 * unloaded at the runtime's next gpuio_synchronize (or destroy), after the kernels that may
 * still run from it; the first module a runtime loaded stays loaded until the runtime is
 * destroyed (the runtime drains through it). An attached module is never unloaded by gpuio.
 */
gpuio_status gpuio_module_destroy(gpuio_module *module);

/* ------------------------------------------------------------------------------------ */
/* Code objects the host loaded itself                                                  */

/**
 * Attaches a CUDA module that the host loaded itself (`cu_module` is a CUmodule): finds
 * its `gpuio_context` global (cuModuleGetGlobal) and points it at the runtime, so that
 * its kernels print through the runtime. The module must be loaded in the primary
 * context of the runtime's GPU (options.gpu; cuDevicePrimaryCtxRetain, or the context
 * the CUDA runtime API uses) and stay loaded until the runtime is destroyed; gpuio never
 * unloads it. `out` may be NULL; if
 * not, it receives a handle for gpuio_module_launch.
 *
 * Kernels of it that the host launches itself (cuLaunchKernel) must be announced with
 * gpuio_prepare_launch first, and waited for with gpuio_synchronize.
 */
gpuio_status gpuio_attach_cuda_module(gpuio_runtime *rt, void *cu_module, gpuio_module **out);

/**
 * Attaches an HSA executable that the host loaded and froze itself (`executable` is an
 * hsa_executable_t's handle, `agent` the hsa_agent_t's handle it was loaded for): points
 * its `gpuio_context` global at the runtime. `out` may be NULL.
 *
 * The runtime must run on the HSA backend (else GPUIO_ERROR_BACKEND_UNAVAILABLE), and
 * `agent` must be its GPU agent. Kernels the host launches itself need gpuio_prepare_launch
 * first, and gpuio_synchronize afterwards.
 */
gpuio_status gpuio_attach_hsa_executable(gpuio_runtime *rt, uint64_t executable, uint64_t agent,
                                         gpuio_module **out);

/**
 * Attaches a module that the host loaded itself with HIP (`hip_module` is a hipModule_t from
 * hipModuleLoadData on HIP device `hip_device`): finds its `gpuio_context` global
 * (hipModuleGetGlobal) and points it at the runtime. The runtime must run on the HSA
 * backend (HIP runs on the same HSA runtime, so the runtime's shared memory is visible to
 * HIP's kernels; else GPUIO_ERROR_BACKEND_UNAVAILABLE), and `hip_device` must be its GPU
 * agent, the first GPU (checked by PCI location: GPUIO_ERROR_CONFIG otherwise). The module
 * must stay loaded until the runtime is destroyed; gpuio never unloads it. `out` may be NULL.
 *
 * Kernels the host launches itself (hipModuleLaunchKernel) need gpuio_prepare_launch first;
 * gpuio_synchronize then waits for the device's HIP work (its null stream, then
 * hipDeviceSynchronize) and drains what they printed. gpuio_module_launch launches on HIP's
 * null stream.
 *
 * Needs libgpuio built with its `hip` feature (`cargo build -p gpuio-capi --features hip`,
 * with HIP's headers and libamdhip64 installed): otherwise GPUIO_ERROR_BACKEND_UNAVAILABLE.
 */
gpuio_status gpuio_attach_hip_module(gpuio_runtime *rt, void *hip_module, int hip_device, gpuio_module **out);

/**
 * Announces that the host is about to launch, itself, kernels of an attached code object:
 * the runtime keeps SQPOLL awake while they run, and the next gpuio_synchronize waits
 * for the device and drains what they printed. Call it before each launch (cheap).
 */
gpuio_status gpuio_prepare_launch(gpuio_runtime *rt);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUIO_H */
