build-tsan/obj/tools/cmd_dump.o: tools/cmd_dump.c runtime/actpath.h \
 runtime/at_common.h tools/cmds.h runtime/guid.h tools/ntreader.h \
 runtime/at_common.h runtime/nt_format.h
runtime/actpath.h:
runtime/at_common.h:
tools/cmds.h:
runtime/guid.h:
tools/ntreader.h:
runtime/at_common.h:
runtime/nt_format.h:
