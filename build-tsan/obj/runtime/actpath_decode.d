build-tsan/obj/runtime/actpath_decode.o: runtime/actpath_decode.c \
 runtime/actpath.h runtime/at_common.h runtime/guid.h
runtime/actpath.h:
runtime/at_common.h:
runtime/guid.h:
