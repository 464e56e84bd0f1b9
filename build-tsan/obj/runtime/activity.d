build-tsan/obj/runtime/activity.o: runtime/activity.c runtime/activity.h \
 runtime/at_common.h runtime/trace.h runtime/nt_format.h \
 runtime/activity_int.h runtime/actpath.h
runtime/activity.h:
runtime/at_common.h:
runtime/trace.h:
runtime/nt_format.h:
runtime/activity_int.h:
runtime/actpath.h:
