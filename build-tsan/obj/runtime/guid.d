build-tsan/obj/runtime/guid.o: runtime/guid.c runtime/guid.h \
 runtime/at_common.h
runtime/guid.h:
runtime/at_common.h:
