build-tsan/obj/tools/ntsym.o: tools/ntsym.c tools/ntsym.h \
 tools/ntreader.h runtime/at_common.h runtime/nt_format.h
tools/ntsym.h:
tools/ntreader.h:
runtime/at_common.h:
runtime/nt_format.h:
