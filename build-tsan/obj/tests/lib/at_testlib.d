build-tsan/obj/tests/lib/at_testlib.o: tests/lib/at_testlib.c \
 tests/lib/at_testlib.h runtime/at_common.h runtime/actpath.h \
 runtime/at_common.h runtime/guid.h tools/ntreader.h runtime/nt_format.h
tests/lib/at_testlib.h:
runtime/at_common.h:
runtime/actpath.h:
runtime/at_common.h:
runtime/guid.h:
tools/ntreader.h:
runtime/nt_format.h:
