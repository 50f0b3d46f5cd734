/*
 * A C host of gpuio (tests/capi.rs builds it with -Wall -Wextra -Werror -pedantic and
 * links it against libgpuio.a). Modes:
 *
 *   host cpu THREADS LINES   CPU backend: C kernels print through the ring; stdout gets
 *                            "t=<thread> i=<n>" lines, a long line, a non-UTF-8 line per
 *                            thread; stderr one "e=<thread>" line per thread.
 *   host errors              every error path; each message on stderr.
 *   host gpu PTX             CUDA: hello, stress (with arguments), from a file, from
 *                            memory and attached; unknown kernel, bad PTX. Exit 77 (skip)
 *                            without a CUDA GPU.
 *   host linked LIB KERNEL   CUDA: a CUDA C++ kernel (tests/cuda/printf_kernel.cu's PTX,
 *                            KERNEL) joined with the device library (LIB) and loaded by
 *                            gpuio_module_load_linked; each thread's line must be the one
 *                            snprintf makes of the same values. Exit 77 without a CUDA GPU.
 *
 * The GPU modes are in host_gpu.c, built with this file.
 *
 * Exit status 0: every check passed (the caller checks the output).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpuio.h"
#include "expect.h"

/* Forcing a GPU backend: a runtime where that GPU is present (destroyed here), else
 * GPUIO_ERROR_BACKEND_UNAVAILABLE with a reason and *rt left NULL. */
static void expect_runtime_or_unavailable(const char *what, gpuio_status got, gpuio_runtime **rt) {
    if (got == GPUIO_OK && *rt != NULL) {
        fprintf(stderr, "ok: %s: GPUIO_OK: the backend is present here\n", what);
        expect("destroy it", gpuio_runtime_destroy(*rt), GPUIO_OK);
        *rt = NULL;
        return;
    }
    if (got == GPUIO_ERROR_BACKEND_UNAVAILABLE && *gpuio_last_error() == '\0') {
        fprintf(stderr, "FAIL: %s: unavailable, with no reason\n", what);
        failures++;
    }
    expect(what, got, GPUIO_ERROR_BACKEND_UNAVAILABLE);
    if (*rt != NULL) {
        fprintf(stderr, "FAIL: a failed create left *out set\n");
        failures++;
    }
}

/* `*o` as gpuio_runtime_options_init leaves it, on the CPU backend. */
static void cpu_options(gpuio_runtime_options *o) {
    gpuio_runtime_options_init(o);
    o->backend = GPUIO_BACKEND_CPU;
}

/* Creating a runtime into `rt` from CPU options `o` with one field changed, `o->field =
 * value`, gives `want`; the check is named "create with <field> <value>". */
#define EXPECT_CREATE_WITH(o, rt, field, value, want)                                      \
    do {                                                                                   \
        cpu_options(o);                                                                    \
        (o)->field = (value);                                                              \
        expect("create with " #field " " #value, gpuio_runtime_create((o), (rt)), (want)); \
    } while (0)

static gpuio_runtime *cpu_runtime(int stdout_fd, uint64_t log_bytes) {
    gpuio_runtime_options o;
    gpuio_runtime *rt = NULL;
    expect("options_init", gpuio_runtime_options_init(&o), GPUIO_OK);
    o.backend = GPUIO_BACKEND_CPU;
    o.stdout_fd = stdout_fd;
    o.log_bytes = log_bytes;
    expect("create cpu runtime", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    if (rt == NULL) {
        exit(1);
    }
    return rt;
}

/* ---------------------------------------------------------------------------- cpu */

struct cpu_job {
    unsigned lines;
    unsigned long long calls; /* threads that ran, counted with an atomic */
    int bad_status;           /* a print that failed */
};

#define LONG_LINE 10000

static void cpu_kernel(const gpuio_thread *t, void *user) {
    struct cpu_job *job = (struct cpu_job *)user;
    unsigned i, half = job->lines / 2;
    char long_line[LONG_LINE + 1];
    char bytes[32];
    int n;
    __atomic_fetch_add(&job->calls, 1, __ATOMIC_RELAXED);
    if (t->global_idx != (uint64_t)t->block_idx * t->block_dim + t->thread_idx) {
        job->bad_status = 1;
    }
    for (i = 0; i < job->lines; i++) {
        if (i == half) {
            /* Longer than the fast path and than the log: still one whole line. */
            n = snprintf(long_line, sizeof long_line, "L t=%llu ", (unsigned long long)t->global_idx);
            memset(long_line + n, 'x', LONG_LINE - 1 - (size_t)n);
            long_line[LONG_LINE - 1] = '\n';
            if (gpuio_print(long_line, LONG_LINE) != GPUIO_OK) {
                job->bad_status = 1;
            }
        }
        if (gpuio_printf("t=%llu i=%u\n", (unsigned long long)t->global_idx, i) != GPUIO_OK) {
            job->bad_status = 1;
        }
    }
    /* Not UTF-8: printed as is. */
    n = snprintf(bytes, sizeof bytes, "B t=%llu \xff\xfe\n", (unsigned long long)t->global_idx);
    if (gpuio_print(bytes, (size_t)n) != GPUIO_OK || gpuio_eprintf("e=%llu\n", (unsigned long long)t->global_idx)) {
        job->bad_status = 1;
    }
}

static int run_cpu(unsigned threads, unsigned lines) {
    struct cpu_job job = {0, 0, 0};
    gpuio_sync_report report;
    gpuio_backend backend;
    unsigned block = threads >= 16 ? 16 : threads;
    gpuio_runtime *rt = cpu_runtime(1, 8192);
    job.lines = lines;
    expect("backend", gpuio_runtime_backend(rt, &backend), GPUIO_OK);
    if (backend != GPUIO_BACKEND_CPU) {
        fprintf(stderr, "FAIL: backend %d\n", (int)backend);
        failures++;
    }
    expect("cpu launch", gpuio_cpu_launch(rt, threads / block, block, cpu_kernel, &job), GPUIO_OK);
    expect("synchronize", gpuio_synchronize(rt, &report), GPUIO_OK);
    if (report.num_outputs != 0 || job.calls != threads || job.bad_status) {
        fprintf(stderr, "FAIL: %u outputs with errors, %llu kernel calls of %u, bad status %d\n",
                report.num_outputs, job.calls, threads, job.bad_status);
        failures++;
    }
    expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);
    return failures ? 1 : 0;
}

/* ---------------------------------------------------------------------------- errors */

struct nested {
    gpuio_runtime *rt;
    gpuio_status sync, destroy, launch;
};

static void nested_kernel(const gpuio_thread *t, void *user) {
    struct nested *n = (struct nested *)user;
    (void)t;
    n->sync = gpuio_synchronize(n->rt, NULL);
    n->destroy = gpuio_runtime_destroy(n->rt);
    n->launch = gpuio_cpu_launch(n->rt, 1, 1, nested_kernel, user);
}

/* Spins until *user (an int, set with an atomic store) is non-zero. */
static void wait_kernel(const gpuio_thread *t, void *user) {
    const struct timespec ms = {0, 1000000};
    (void)t;
    while (!__atomic_load_n((int *)user, __ATOMIC_ACQUIRE)) {
        nanosleep(&ms, NULL);
    }
}

static void hello_kernel(const gpuio_thread *t, void *user) {
    (void)user;
    gpuio_printf("hello from thread %llu\n", (unsigned long long)t->global_idx);
}

static int run_errors(void) {
    gpuio_runtime_options o;
    gpuio_runtime *rt = NULL;
    gpuio_module *m = NULL;
    gpuio_sync_report report;
    gpuio_backend backend;
    gpuio_arg args[2];
    struct nested n;
    static const char garbage[] = "this is not a code object";
    int fds[2];
    int closed_fd;
    int go = 0;

    /* Creation. */
    expect("options_init(NULL)", gpuio_runtime_options_init(NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("create(NULL, NULL)", gpuio_runtime_create(NULL, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    memset(&o, 0, sizeof o);
    expect("create with uninitialised options", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_INVALID_ARGUMENT);
    EXPECT_CREATE_WITH(&o, &rt, backend, 42, GPUIO_ERROR_INVALID_ARGUMENT);
    EXPECT_CREATE_WITH(&o, &rt, stdout_fd, -1, GPUIO_ERROR_INVALID_ARGUMENT);
    EXPECT_CREATE_WITH(&o, &rt, log_bytes, 1000, GPUIO_ERROR_CONFIG);
    EXPECT_CREATE_WITH(&o, &rt, sandbox, 7, GPUIO_ERROR_INVALID_ARGUMENT);
    EXPECT_CREATE_WITH(&o, &rt, arena_block_bytes, 1000, GPUIO_ERROR_CONFIG);
    cpu_options(&o);
    o.sandbox = GPUIO_SANDBOX_FILE_IO;
    o.arena_bytes = 1 << 20;
    expect("create with the file-I/O sandbox", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    /* A host built against the header before hang_timeout_ms: its smaller struct works. */
    gpuio_runtime_options_init(&o);
    if (o.hang_timeout_ms != 0) {
        fprintf(stderr, "FAIL: options_init set hang_timeout_ms to %llu\n", (unsigned long long)o.hang_timeout_ms);
        failures++;
    }
    o.backend = GPUIO_BACKEND_CPU;
    o.struct_size = (uint32_t)offsetof(gpuio_runtime_options, hang_timeout_ms);
    expect("create with the previous struct_size", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    /* ... and one built before rings. */
    o.struct_size = (uint32_t)offsetof(gpuio_runtime_options, rings);
    expect("create with the struct_size before rings", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    /* ... and one built before gpu, whose bytes there (0 here) are not read as GPU 0,
     * which the CPU backend would refuse. */
    o.struct_size = (uint32_t)offsetof(gpuio_runtime_options, gpu);
    o.gpu = 0;
    expect("create with the struct_size before gpu", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    gpuio_runtime_options_init(&o);
    if (o.gpu != -1) {
        fprintf(stderr, "FAIL: options_init set gpu to %d\n", (int)o.gpu);
        failures++;
    }
    o.backend = GPUIO_BACKEND_CPU;
    o.gpu = 0;
    expect("create naming a GPU on the CPU backend", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_CONFIG);
    o.gpu = -2;
    expect("create with gpu -2", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_INVALID_ARGUMENT);
    o.gpu = -1;
    o.reserved2 = 1;
    expect("create with reserved2 set", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_INVALID_ARGUMENT);
    o.reserved2 = 0;
    cpu_options(&o);
    o.rings = 9;
    expect("create with 9 rings", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_CONFIG);
    o.rings = 2;
    o.reserved = 1;
    expect("create with reserved set", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_INVALID_ARGUMENT);
    o.reserved = 0;
    expect("create with 2 rings", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    o.struct_size = (uint32_t)sizeof o + 8;
    expect("create with a struct_size from the future", gpuio_runtime_create(&o, &rt), GPUIO_ERROR_INVALID_ARGUMENT);
    /* A kernel that waits for the host: synchronize gives up after the hang timeout and
     * names the running thread; once released, a second synchronize succeeds. */
    cpu_options(&o);
    o.hang_timeout_ms = 300;
    expect("create with a hang timeout", gpuio_runtime_create(&o, &rt), GPUIO_OK);
    expect("cpu_launch a waiting kernel", gpuio_cpu_launch(rt, 1, 1, wait_kernel, &go), GPUIO_OK);
    expect("synchronize a waiting kernel", gpuio_synchronize(rt, &report), GPUIO_ERROR_HANG);
    if (strstr(gpuio_last_error(), "1 kernel thread(s) still running") == NULL) {
        fprintf(stderr, "FAIL: the hang's message does not name the running thread\n");
        failures++;
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    expect("synchronize the released kernel", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("destroy it", gpuio_runtime_destroy(rt), GPUIO_OK);
    rt = NULL;
    gpuio_runtime_options_init(&o);
    o.backend = GPUIO_BACKEND_HSA;
    expect_runtime_or_unavailable("create forcing hsa", gpuio_runtime_create(&o, &rt), &rt);
    setenv("GPUIO_BACKEND", "hsa", 1);
    expect_runtime_or_unavailable("create with GPUIO_BACKEND=hsa", gpuio_runtime_create(NULL, &rt), &rt);
    setenv("GPUIO_BACKEND", "tpu", 1);
    expect("create with GPUIO_BACKEND=tpu", gpuio_runtime_create(NULL, &rt), GPUIO_ERROR_CONFIG);
    unsetenv("GPUIO_BACKEND");

    /* NULL and made-up handles. */
    expect("synchronize(NULL)", gpuio_synchronize(NULL, NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("destroy(NULL)", gpuio_runtime_destroy(NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("destroy(made-up handle)", gpuio_runtime_destroy((gpuio_runtime *)(uintptr_t)0x1234),
           GPUIO_ERROR_INVALID_HANDLE);
    expect("cpu_launch(NULL runtime)", gpuio_cpu_launch(NULL, 1, 1, hello_kernel, NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("module_launch(NULL)", gpuio_module_launch(NULL, "hello", 1, 1, NULL, 0), GPUIO_ERROR_INVALID_HANDLE);
    expect("module_destroy(NULL)", gpuio_module_destroy(NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("prepare_launch(NULL)", gpuio_prepare_launch(NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("print outside a kernel", gpuio_print("x\n", 2), GPUIO_ERROR_WRONG_CONTEXT);
    expect("eprintf outside a kernel", gpuio_eprintf("%d\n", 1), GPUIO_ERROR_WRONG_CONTEXT);
    expect("print(NULL, 5)", gpuio_print(NULL, 5), GPUIO_ERROR_INVALID_ARGUMENT);

    /* A CPU runtime. */
    rt = cpu_runtime(1, 0);
    if (*gpuio_last_error() != '\0') {
        fprintf(stderr, "FAIL: last error not empty after a success\n");
        failures++;
    }
    expect("backend(rt, NULL)", gpuio_runtime_backend(rt, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("backend", gpuio_runtime_backend(rt, &backend), GPUIO_OK);
    expect("cpu_launch 0 x 1", gpuio_cpu_launch(rt, 0, 1, hello_kernel, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("cpu_launch 1 x 0", gpuio_cpu_launch(rt, 1, 0, hello_kernel, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("cpu_launch NULL kernel", gpuio_cpu_launch(rt, 1, 1, NULL, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("cpu_launch 1000 x 1000", gpuio_cpu_launch(rt, 1000, 1000, hello_kernel, NULL), GPUIO_ERROR_CONFIG);
    expect("load_data on the cpu backend", gpuio_module_load_data(rt, garbage, sizeof garbage, &m),
           GPUIO_ERROR_BACKEND_UNAVAILABLE);
    expect("load_data(NULL image)", gpuio_module_load_data(rt, NULL, 10, &m), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("load_data(NULL out)", gpuio_module_load_data(rt, garbage, sizeof garbage, NULL),
           GPUIO_ERROR_INVALID_ARGUMENT);
    expect("load_file(missing file)", gpuio_module_load_file(rt, "/nonexistent/kernels.ptx", &m), GPUIO_ERROR_OS);
    expect("load_file(NULL path)", gpuio_module_load_file(rt, NULL, &m), GPUIO_ERROR_INVALID_ARGUMENT);
    /* Joining PTX (a C++ kernel's with the device library): the size query, the join, and
     * what is refused, on any backend; loading the join needs a GPU. */
    {
        static const char lib[] = ".version 7.8\n.target sm_90\n.address_size 64\n\n"
                                  ".visible .func  (.param .b32 func_retval0) gpuio_puts(\n\t.param .b64 p\n)\n"
                                  "{\n\tret;\n}\n";
        static const char kern[] = ".version 9.0\n.target sm_90\n.address_size 64\n\n"
                                   ".extern .func  (.param .b32 func_retval0) gpuio_puts\n(\n\t.param .b64 p\n)\n;\n"
                                   ".visible .entry k()\n{\n\tret;\n}\n";
        static const char sm60[] = ".version 9.0\n.target sm_60\n.address_size 64\n";
        const char *both[2] = {lib, kern};
        const char *mixed[2] = {lib, sm60};
        const char *backwards[2] = {kern, lib};
        size_t need = 0, need_again = 0;
        char small[8];
        char *joined;
        expect("link_ptx(size query)", gpuio_link_ptx(both, 2, NULL, 0, &need), GPUIO_OK);
        joined = need > 0 ? (char *)malloc(need) : NULL;
        if (joined == NULL) {
            fprintf(stderr, "FAIL: link_ptx's size query said %zu bytes\n", need);
            failures++;
        } else {
            expect("link_ptx", gpuio_link_ptx(both, 2, joined, need, &need_again), GPUIO_OK);
            if (need_again != need || strlen(joined) + 1 != need || strncmp(joined, ".version 9.0\n", 13) != 0 ||
                strstr(joined + 1, ".version") != NULL || strstr(joined, ".entry k") == NULL ||
                strstr(joined, ".extern") != NULL) {
                fprintf(stderr, "FAIL: link_ptx joined %zu of %zu bytes: %s\n", need_again, need, joined);
                failures++;
            }
            free(joined);
        }
        memset(small, 'x', sizeof small);
        expect("link_ptx(a small buffer)", gpuio_link_ptx(both, 2, small, sizeof small, &need_again),
               GPUIO_ERROR_INVALID_ARGUMENT);
        if (need_again != need || small[0] != 'x') {
            fprintf(stderr, "FAIL: a small buffer got len %zu (want %zu) or was written\n", need_again, need);
            failures++;
        }
        expect("link_ptx(two targets)", gpuio_link_ptx(mixed, 2, NULL, 0, &need), GPUIO_ERROR_CONFIG);
        expect("link_ptx(the library last)", gpuio_link_ptx(backwards, 2, NULL, 0, &need), GPUIO_ERROR_CONFIG);
        expect("link_ptx(no modules)", gpuio_link_ptx(both, 0, NULL, 0, &need), GPUIO_ERROR_INVALID_ARGUMENT);
        expect("link_ptx(NULL len)", gpuio_link_ptx(both, 2, NULL, 0, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
        {
            const char *not_text[1] = {"\xff\xfe"};
            expect("link_ptx(not UTF-8)", gpuio_link_ptx(not_text, 1, NULL, 0, &need), GPUIO_ERROR_INVALID_ARGUMENT);
        }
        expect("load_linked on the cpu backend", gpuio_module_load_linked(rt, mixed, 2, &m),
               GPUIO_ERROR_BACKEND_UNAVAILABLE);
    }
    if (m != NULL) {
        fprintf(stderr, "FAIL: a failed load left *out set\n");
        failures++;
    }
    expect("module_launch(runtime handle)", gpuio_module_launch((gpuio_module *)rt, "hello", 1, 1, NULL, 0),
           GPUIO_ERROR_INVALID_HANDLE);
    expect("module_destroy(runtime handle)", gpuio_module_destroy((gpuio_module *)rt), GPUIO_ERROR_INVALID_HANDLE);
    expect("attach_cuda_module(NULL)", gpuio_attach_cuda_module(rt, NULL, &m), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("attach_cuda_module on the cpu backend", gpuio_attach_cuda_module(rt, (void *)&o, NULL),
           GPUIO_ERROR_BACKEND_UNAVAILABLE);
    expect("attach_hsa_executable(0)", gpuio_attach_hsa_executable(rt, 0, 1, NULL), GPUIO_ERROR_INVALID_ARGUMENT);
    expect("attach_hsa_executable", gpuio_attach_hsa_executable(rt, 1, 1, &m), GPUIO_ERROR_BACKEND_UNAVAILABLE);
    if (strstr(gpuio_last_error(), "runs on the cpu backend") == NULL) {
        fprintf(stderr, "FAIL: attach_hsa_executable's message does not say the runtime is not on HSA\n");
        failures++;
    }
    expect("attach_hip_module(NULL)", gpuio_attach_hip_module(rt, NULL, 0, &m), GPUIO_ERROR_INVALID_ARGUMENT);
    /* Without the `hip` feature: unavailable, saying how to build it; with it: the runtime
     * is not on HSA. */
    expect("attach_hip_module", gpuio_attach_hip_module(rt, (void *)&o, 0, &m), GPUIO_ERROR_BACKEND_UNAVAILABLE);
    if (m != NULL) {
        fprintf(stderr, "FAIL: attach_hip_module failed and left *out set\n");
        failures++;
    }
    expect("prepare_launch on the cpu backend", gpuio_prepare_launch(rt), GPUIO_ERROR_BACKEND_UNAVAILABLE);
    args[0] = gpuio_arg_u32(7);
    args[1] = gpuio_arg_f64(0.5);
    (void)gpuio_arg_u64(1);
    (void)gpuio_arg_f32(1.0f);
    (void)args;

    /* Runtime calls from inside a kernel are refused, not deadlocks. */
    n.rt = rt;
    n.sync = n.destroy = n.launch = GPUIO_OK;
    expect("cpu_launch nested", gpuio_cpu_launch(rt, 1, 1, nested_kernel, &n), GPUIO_OK);
    expect("synchronize", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("synchronize inside a kernel", n.sync, GPUIO_ERROR_WRONG_CONTEXT);
    expect("destroy inside a kernel", n.destroy, GPUIO_ERROR_WRONG_CONTEXT);
    expect("cpu_launch inside a kernel", n.launch, GPUIO_ERROR_WRONG_CONTEXT);

    /* Double destroy, use after destroy. */
    expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);
    expect("destroy again", gpuio_runtime_destroy(rt), GPUIO_ERROR_INVALID_HANDLE);
    expect("synchronize after destroy", gpuio_synchronize(rt, NULL), GPUIO_ERROR_INVALID_HANDLE);
    expect("cpu_launch after destroy", gpuio_cpu_launch(rt, 1, 1, hello_kernel, NULL), GPUIO_ERROR_INVALID_HANDLE);

    /* Prints to a closed fd: reported by synchronize, per fd, nothing hangs. */
    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    /* A descriptor number far above the lowest free ones, closed: the runtime's own new
     * descriptors (its rings) take the lowest free numbers, and must not land on it. */
    closed_fd = fcntl(fds[1], F_DUPFD, 200);
    close(fds[0]);
    close(fds[1]);
    close(closed_fd);
    fds[1] = closed_fd;
    rt = cpu_runtime(fds[1], 0);
    expect("cpu_launch to a closed fd", gpuio_cpu_launch(rt, 2, 8, hello_kernel, NULL), GPUIO_OK);
    expect("synchronize reports the lost lines", gpuio_synchronize(rt, &report), GPUIO_ERROR_PRINT);
    if (report.num_outputs != 1 || report.outputs[0].fd != fds[1] || report.outputs[0].last_errno != EBADF ||
        report.outputs[0].lost_lines != 16 || report.outputs[0].failed_writes == 0) {
        fprintf(stderr, "FAIL: report: %u outputs, fd %d errno %d lines %llu\n", report.num_outputs,
                report.outputs[0].fd, report.outputs[0].last_errno,
                (unsigned long long)report.outputs[0].lost_lines);
        failures++;
    } else {
        fprintf(stderr, "ok: report: fd %d, %u failed writes, errno %d, %llu bytes / %llu lines lost\n",
                report.outputs[0].fd, report.outputs[0].failed_writes, report.outputs[0].last_errno,
                (unsigned long long)report.outputs[0].lost_bytes, (unsigned long long)report.outputs[0].lost_lines);
    }
    expect("synchronize again: reported once", gpuio_synchronize(rt, &report), GPUIO_OK);
    expect("destroy", gpuio_runtime_destroy(rt), GPUIO_OK);

    if (strcmp(gpuio_status_name((gpuio_status)999), "GPUIO_STATUS_UNKNOWN") != 0 ||
        strcmp(gpuio_status_name(GPUIO_ERROR_INTERNAL), "GPUIO_ERROR_INTERNAL") != 0) {
        fprintf(stderr, "FAIL: gpuio_status_name\n");
        failures++;
    }
    fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* The GPU modes, in host_gpu.c. */
int run_gpu(const char *ptx_path);
int run_linked(const char *library_path, const char *kernel_path);

int main(int argc, char **argv) {
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[1], "cpu") == 0) {
        return run_cpu((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]));
    }
    if (argc == 2 && strcmp(argv[1], "errors") == 0) {
        return run_errors();
    }
    if (argc == 3 && strcmp(argv[1], "gpu") == 0) {
        return run_gpu(argv[2]);
    }
    if (argc == 4 && strcmp(argv[1], "linked") == 0) {
        return run_linked(argv[2], argv[3]);
    }
    fprintf(stderr, "usage: %s cpu THREADS LINES | errors | gpu PTX | linked LIB KERNEL\n", argv[0]);
    return 2;
}
