build-tsan/obj/runtime/event_type.o: runtime/event_type.c \
 runtime/trace_int.h runtime/trace.h runtime/at_common.h \
 runtime/nt_format.h
runtime/trace_int.h:
runtime/trace.h:
runtime/at_common.h:
runtime/nt_format.h:
