/* activity_int.h: test hooks of the activity engine (hidden; not part of the shim's API). They let
 * the unit tests reproduce ids of other processes and large counters (the oracle's rows) without
 * starting four billion activities. */
#ifndef AT_ACTIVITY_INT_H
#define AT_ACTIVITY_INT_H

#include "activity.h"

/* The pid put into checksums from now on (0: back to getpid()). */
void at_activity_test_set_pid(uint32_t pid);
/* The last child number a handed out (a == NULL: the process-wide root counter). */
void at_activity_test_set_last_child(at_activity *a, uint32_t last);

/* a's reference count as it stands (the flow caches' references included). */
uint32_t at_activity_test_refs(const at_activity *a);

#endif
