build-tsan/obj/tools/ntreader.o: tools/ntreader.c tools/ntreader.h \
 runtime/at_common.h runtime/nt_format.h runtime/guid.h \
 runtime/at_common.h
tools/ntreader.h:
runtime/at_common.h:
runtime/nt_format.h:
runtime/guid.h:
runtime/at_common.h:
