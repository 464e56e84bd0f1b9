build-tsan/obj/runtime/ntw_block.o: runtime/ntw_block.c \
 runtime/trace_int.h runtime/trace.h runtime/at_common.h \
 runtime/nt_format.h
runtime/trace_int.h:
runtime/trace.h:
runtime/at_common.h:
runtime/nt_format.h:
