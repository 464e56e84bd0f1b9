/* nt_format.h: constants of the nettrace V4/V5 format (see ../shared/nettrace-v5.md), shared by the
 * writer in runtime/ and the reader in tools/ so both speak exactly the same bytes. */
#ifndef NT_FORMAT_H
#define NT_FORMAT_H

#define NT_MAGIC "Nettrace"
#define NT_SERIALIZER_SIG "!FastSerialization.1"
/* A file's first 32 bytes: the magic, then the signature with its length. A writer writes them
 * first, in one write, so even a torn trace starts with them. */
#define NT_FILE_HEAD NT_MAGIC "\x14\0\0\0" NT_SERIALIZER_SIG

/* FastSerialization tags */
enum {
    NT_TAG_NULL_REFERENCE = 1,
    NT_TAG_BEGIN_OBJECT = 4,
    NT_TAG_BEGIN_PRIVATE_OBJECT = 5,
    NT_TAG_END_OBJECT = 6,
};

#define NT_TRACE_OBJECT_VERSION 4
#define NT_TRACE_OBJECT_MIN_VERSION 4
#define NT_TRACE_PAYLOAD_SIZE 48
#define NT_BLOCK_VERSION 2
#define NT_BLOCK_MIN_VERSION 2
#define NT_BLOCK_HEADER_SIZE 20
#define NT_MAX_BLOCK_SIZE (100 * 1024) /* what the runtime uses; readers allocate per block */

#define NT_NAME_TRACE "Trace"
#define NT_NAME_EVENT_BLOCK "EventBlock"
#define NT_NAME_METADATA_BLOCK "MetadataBlock"
#define NT_NAME_STACK_BLOCK "StackBlock"
#define NT_NAME_SP_BLOCK "SPBlock"

/* block header flags */
#define NT_BLOCK_FLAG_COMPRESSED 0x1

/* compressed event blob header flags */
enum {
    NT_EV_METADATA_ID = 0x01,
    NT_EV_CAPTURE_THREAD_AND_SEQ = 0x02,
    NT_EV_THREAD_ID = 0x04,
    NT_EV_STACK_ID = 0x08,
    NT_EV_ACTIVITY_ID = 0x10,
    NT_EV_RELATED_ACTIVITY_ID = 0x20,
    NT_EV_SORTED = 0x40,
    NT_EV_DATA_LENGTH = 0x80,
};

/* metadata V5 tags */
enum {
    NT_META_TAG_OPCODE = 1,
    NT_META_TAG_V2PARAMS = 2,
};

/* field type codes (System.TypeCode numbering, EventPipeParameterType) */
enum {
    NT_TYPE_OBJECT = 1,
    NT_TYPE_BOOLEAN = 3,
    NT_TYPE_CHAR = 4,
    NT_TYPE_SBYTE = 5,
    NT_TYPE_BYTE = 6,
    NT_TYPE_INT16 = 7,
    NT_TYPE_UINT16 = 8,
    NT_TYPE_INT32 = 9,
    NT_TYPE_UINT32 = 10,
    NT_TYPE_INT64 = 11,
    NT_TYPE_UINT64 = 12,
    NT_TYPE_SINGLE = 13,
    NT_TYPE_DOUBLE = 14,
    NT_TYPE_DECIMAL = 15,
    NT_TYPE_DATETIME = 16,
    NT_TYPE_GUID = 17,
    NT_TYPE_STRING = 18,
    NT_TYPE_ARRAY = 19,
};

/* opcodes (ETW / EventSource) */
enum {
    NT_OPCODE_INFO = 0,
    NT_OPCODE_START = 1,
    NT_OPCODE_STOP = 2,
    NT_OPCODE_DC_START = 3,
    NT_OPCODE_DC_STOP = 4,
    NT_OPCODE_EXTENSION = 5,
    NT_OPCODE_REPLY = 6,
    NT_OPCODE_RESUME = 7,
    NT_OPCODE_SUSPEND = 8,
    NT_OPCODE_SEND = 9,
    NT_OPCODE_RECEIVE = 240,
};

/* levels */
enum {
    NT_LEVEL_ALWAYS = 0,
    NT_LEVEL_CRITICAL = 1,
    NT_LEVEL_ERROR = 2,
    NT_LEVEL_WARNING = 3,
    NT_LEVEL_INFO = 4,
    NT_LEVEL_VERBOSE = 5,
};

/* Universal.System provider (§9): native modules and symbols; dispatched by event id, payloads of
 * varuints (LEB128) and short strings (uint16 byte length + UTF-8, no NUL) */
#define NT_UNIVERSAL_SYSTEM "Universal.System"
enum {
    NT_US_PROCESS_MAPPING = 3,          /* Id, Start, End (exclusive; older acttrace files: inclusive),
                                         * FileOffset, FileName, MetadataId */
    NT_US_PROCESS_SYMBOL = 4,           /* Id, MappingId, Start, End (inclusive; acttrace writes one
                                         * past, symrun.c says why), Name, then acttrace's Flags */
    NT_US_PROCESS_MAPPING_METADATA = 5, /* Id, SymbolMetadata (JSON), VersionMetadata (JSON) */
};

/* The .NET runtime's loader and method events (ACTTRACE_SYMBOLS=methods): the same naming as
 * Universal.System through events TraceLog applies to any frame, so the file has no Universal.System
 * event and PerfView keeps its activity view. Payloads as the runtime writes them: little-endian
 * integers, NUL-terminated UTF-16LE strings; metadata with no fields (readers know the layout). */
#define NT_CLR_RUNTIME "Microsoft-Windows-DotNETRuntime"
enum {
    NT_CLR_MODULE_LOAD = 152,          /* version 1: ModuleID u64, AssemblyID u64, ModuleFlags u32,
                                        * Reserved1 u32, ModuleILPath, ModuleNativePath, ClrInstanceID u16 */
    NT_CLR_METHOD_LOAD_VERBOSE = 143,  /* version 1: MethodID u64, ModuleID u64, MethodStartAddress u64,
                                        * MethodSize u32 (end exclusive), MethodToken u32, MethodFlags u32,
                                        * MethodNamespace, MethodName, MethodSignature, ClrInstanceID u16 */
    NT_CLR_METHOD_FLAG_JITTED = 0x8,   /* TraceLog maps only "jitted" methods by address */
};

/* ProcessSymbol's Flags (a varuint after Name, which TraceEvent does not read; older acttrace files
 * have none): the Name is as readers show it (demangled by the writer where it could), so our tools
 * show it unchanged, as TraceEvent does. Without it the tools demangle what looks mangled. */
#define NT_US_SYMBOL_NAME_FINAL 1u

#endif
