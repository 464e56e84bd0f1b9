build-tsan/obj/runtime/payload.o: runtime/payload.c runtime/trace.h \
 runtime/at_common.h runtime/nt_format.h
runtime/trace.h:
runtime/at_common.h:
runtime/nt_format.h:
