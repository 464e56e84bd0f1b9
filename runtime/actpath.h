/* actpath.h: the activity-path codec: EventSource ActivityTracker's encoding of a path such as
 * //1/5/1 into a GUID (AddIdToGuid/WriteNibble, checksum XOR pid), and the PerfView-style decoder.
 * Byte-identical to the runtime; ../shared/activity-path-vectors.tsv is the oracle. */
#ifndef AT_ACTPATH_H
#define AT_ACTPATH_H

#include "at_common.h"

#define AT_ACTPATH_END 12    /* bytes 0..11 hold the path, 12..15 the checksum */
#define AT_ACTPATH_NOFIT 13  /* add_id result when the id did not fit */

/* Append id to the path in g starting at byte offset where. Returns the new offset or
 * AT_ACTPATH_NOFIT. Recomputes the checksum with pid. overflow: write the '$' overflow form. */
int at_actpath_add_id(at_guid *g, int where, uint32_t id, bool overflow, uint32_t pid);
/* *out = *parent with id appended at where (at_actpath_add_id's result, never overflow form): one
 * pass in registers for the shapes a Start makes (where <= 7: anything fits), the general encoder
 * otherwise. out and parent must not overlap. */
int at_actpath_child(at_guid *out, const at_guid *parent, int where, uint32_t id, uint32_t pid);
/* Is g an activity-path GUID for pid (new style: checksum ^ pid, or old style)? */
bool at_actpath_is_path(const at_guid *g, uint32_t pid);
/* The pid encoded in a path GUID's checksum. */
uint32_t at_actpath_pid(const at_guid *g);
/* Decode as PerfView does: "/#<pid>/1/5/1/". Returns length or -1 if buf too small. */
int at_actpath_format_perfview(const at_guid *g, char *buf, size_t n);
/* Decode in EventSource notation: "//1/5/1" (overflow ids shown with '$'). -1 if not a path. */
int at_actpath_format(const at_guid *g, uint32_t pid, char *buf, size_t n);

#endif
