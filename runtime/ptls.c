/* ptls.c: at_ptls_off (at_common.h), the one writer of a word every other file reads as a constant.
 * Kept apart from at_common.h, which declares it const for them. */
#include <stdint.h>

/* at_common.h's at_path_tls_v and its section for the interposers' page, by name only */
extern __thread __attribute__((tls_model("initial-exec"))) char at_path_tls_v[];
long at_ptls_off_rw __asm__("at_ptls_off") __attribute__((section(".bss.at_hot.2")));

void at_ptls_init(void)
{
    at_ptls_off_rw = (long)(at_path_tls_v - (char *)__builtin_thread_pointer());
}
