/* hookpath.c: the hooked call's C path as one translation unit, the stub's entry and return
 * (hook/stub.c) with the hook logic (hooks.c), so that a plain rule's Start and Stop are inlined into
 * the stub's entry and return rather than reached through two calls each way. */
#include "hooks.c"
#include "hook/stub.c"
