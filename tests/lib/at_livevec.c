/* at_livevec.c: see at_livevec.h. */
#include "at_livevec.h"
#include "actpath.h"

#include <stdlib.h>
#include <string.h>

bool at_vector_row_superseded(const char *path)
{
    at_guid g;
    memset(&g, 0, sizeof g);
    int off = 0;
    for (const char *s = path; *s == '/' && off < AT_ACTPATH_END;) {
        char *e;
        uint32_t id = (uint32_t)strtoul(s + 1, &e, 10);
        s = e;
        if (id >= 256 && id < 4096 && g.b[off] == 0)
            return true;
        off = at_actpath_add_id(&g, off, id, false, 1);
    }
    return false;
}
