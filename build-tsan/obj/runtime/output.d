build-tsan/obj/runtime/output.o: runtime/output.c runtime/trace_int.h \
 runtime/trace.h runtime/at_common.h runtime/nt_format.h
runtime/trace_int.h:
runtime/trace.h:
runtime/at_common.h:
runtime/nt_format.h:
