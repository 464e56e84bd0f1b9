build-tsan/obj/runtime/actpath.o: runtime/actpath.c runtime/actpath.h \
 runtime/at_common.h
runtime/actpath.h:
runtime/at_common.h:
