/* guid.h: GUID helpers: .NET-style formatting/parsing and the EventSource provider GUID that
 * TraceEvent derives from a provider name (SHA-1 name hash, RFC 4122 v5 style). */
#ifndef AT_GUID_H
#define AT_GUID_H

#include "at_common.h"

/* "00000011-0000-0000-0000-0000da999c59" (36 chars + NUL). */
void at_guid_format(const at_guid *g, char out[37]);
bool at_guid_parse(const char *s, at_guid *g);
/* TraceEvent's GetProviderGuidFromProviderName. */
void at_guid_from_provider_name(const char *name, at_guid *out);

#endif
