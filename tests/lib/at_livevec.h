/* at_livevec.h: which rows of ../shared/activity-path-vectors.tsv the live runtime contradicts. The
 * table keeps a 0x00 byte after an id of 256..4095 whose size code lands in a high half; .NET 10 writes
 * no such byte (tests/unit/test_actpath_live.c checks the encoder against the runtime itself). */
#ifndef AT_LIVEVEC_H
#define AT_LIVEVEC_H

#include <stdbool.h>

/* Does the table's path "/1/a/b" hold such an id (its bytes in the table are not the runtime's)? */
bool at_vector_row_superseded(const char *path);

#endif
