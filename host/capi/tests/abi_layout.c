/*
 * Prints the layout of every struct and the value of every constant in gpuio.h, one per
 * line, for gpuio-capi's `abi` test, which compares them with the Rust definitions.
 * Compiled as C11 and as C++11, with -Wall -Wextra -Werror -pedantic: both must print the
 * same.
 */
#include <stddef.h>
#include <stdio.h>

#include "gpuio.h"

#ifdef __cplusplus
#define ALIGNOF(T) alignof(T)
#else
#define ALIGNOF(T) _Alignof(T)
#endif

#define TYPE(T) printf("size %s %zu\nalign %s %zu\n", #T, sizeof(T), #T, (size_t)ALIGNOF(T))
#define FIELD(T, f) printf("offset %s.%s %zu\n", #T, #f, offsetof(T, f))
#define VALUE(v) printf("value %s %lld\n", #v, (long long)(v))

int main(void) {
    TYPE(gpuio_status);
    TYPE(gpuio_backend);
    TYPE(gpuio_sandbox);
    TYPE(gpuio_arg_kind);
    TYPE(gpuio_cpu_kernel);

    TYPE(gpuio_runtime_options);
    FIELD(gpuio_runtime_options, struct_size);
    FIELD(gpuio_runtime_options, backend);
    FIELD(gpuio_runtime_options, sq_entries);
    FIELD(gpuio_runtime_options, cq_entries);
    FIELD(gpuio_runtime_options, log_bytes);
    FIELD(gpuio_runtime_options, stdout_fd);
    FIELD(gpuio_runtime_options, stderr_fd);
    FIELD(gpuio_runtime_options, max_flights);
    FIELD(gpuio_runtime_options, sq_thread_idle_ms);
    FIELD(gpuio_runtime_options, gpu_stack_bytes);
    FIELD(gpuio_runtime_options, arena_bytes);
    FIELD(gpuio_runtime_options, arena_block_bytes);
    FIELD(gpuio_runtime_options, sandbox);
    FIELD(gpuio_runtime_options, hang_timeout_ms);
    FIELD(gpuio_runtime_options, rings);
    FIELD(gpuio_runtime_options, reserved);
    FIELD(gpuio_runtime_options, gpu);
    FIELD(gpuio_runtime_options, reserved2);

    TYPE(gpuio_output_errors);
    FIELD(gpuio_output_errors, fd);
    FIELD(gpuio_output_errors, failed_writes);
    FIELD(gpuio_output_errors, last_errno);
    FIELD(gpuio_output_errors, format_errors);
    FIELD(gpuio_output_errors, lost_bytes);
    FIELD(gpuio_output_errors, lost_lines);

    TYPE(gpuio_sync_report);
    FIELD(gpuio_sync_report, num_outputs);
    FIELD(gpuio_sync_report, outputs);

    TYPE(gpuio_thread);
    FIELD(gpuio_thread, thread_idx);
    FIELD(gpuio_thread, block_idx);
    FIELD(gpuio_thread, block_dim);
    FIELD(gpuio_thread, grid_dim);
    FIELD(gpuio_thread, global_idx);

    TYPE(gpuio_arg);
    FIELD(gpuio_arg, kind);
    FIELD(gpuio_arg, value);

    VALUE(GPUIO_OK);
    VALUE(GPUIO_ERROR_INVALID_ARGUMENT);
    VALUE(GPUIO_ERROR_INVALID_HANDLE);
    VALUE(GPUIO_ERROR_CONFIG);
    VALUE(GPUIO_ERROR_BACKEND_UNAVAILABLE);
    VALUE(GPUIO_ERROR_URING_UNAVAILABLE);
    VALUE(GPUIO_ERROR_OS);
    VALUE(GPUIO_ERROR_DRIVER);
    VALUE(GPUIO_ERROR_NOT_FOUND);
    VALUE(GPUIO_ERROR_KERNEL);
    VALUE(GPUIO_ERROR_PRINT);
    VALUE(GPUIO_ERROR_WRONG_CONTEXT);
    VALUE(GPUIO_ERROR_INTERNAL);
    VALUE(GPUIO_ERROR_HANG);

    VALUE(GPUIO_BACKEND_AUTO);
    VALUE(GPUIO_BACKEND_CPU);
    VALUE(GPUIO_BACKEND_CUDA);
    VALUE(GPUIO_BACKEND_HSA);
    VALUE(GPUIO_SANDBOX_PRINT_ONLY);
    VALUE(GPUIO_SANDBOX_FILE_IO);
    VALUE(GPUIO_SANDBOX_OFF);

    VALUE(GPUIO_ARG_U32);
    VALUE(GPUIO_ARG_U64);
    VALUE(GPUIO_ARG_F32);
    VALUE(GPUIO_ARG_F64);

    VALUE(GPUIO_MAX_OUTPUTS);
    return 0;
}
