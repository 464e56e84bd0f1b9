build-tsan/obj/tools/cmd_verify.o: tools/cmd_verify.c tools/cmds.h \
 tools/ntreader.h runtime/at_common.h runtime/nt_format.h
tools/cmds.h:
tools/ntreader.h:
runtime/at_common.h:
runtime/nt_format.h:
