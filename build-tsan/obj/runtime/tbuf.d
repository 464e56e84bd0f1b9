build-tsan/obj/runtime/tbuf.o: runtime/tbuf.c runtime/trace_int.h \
 runtime/trace.h runtime/at_common.h runtime/nt_format.h
runtime/trace_int.h:
runtime/trace.h:
runtime/at_common.h:
runtime/nt_format.h:
