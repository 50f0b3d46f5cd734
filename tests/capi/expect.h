/*
 * The checks the C test hosts (host.c, hip_host.c) share: `expect` compares a call's status
 * with the one wanted and prints the call's message either way; `failures` counts the
 * mismatches (the host exits non-zero if any).
 */
#ifndef GPUIO_TEST_EXPECT_H
#define GPUIO_TEST_EXPECT_H

#include <stdio.h>

#include "gpuio.h"

static int failures;

/* Checks that `got` is `want`; prints the call's message either way. */
static void expect(const char *what, gpuio_status got, gpuio_status want) {
    const char *msg = gpuio_last_error();
    if (got == want) {
        fprintf(stderr, "ok: %s: %s%s%s\n", what, gpuio_status_name(got), *msg ? ": " : "", msg);
    } else {
        fprintf(stderr, "FAIL: %s: got %s (%s), want %s\n", what, gpuio_status_name(got), msg,
                gpuio_status_name(want));
        failures++;
    }
}

#endif
