build-tsan/obj/config/config.o: config/config.c config/config.h
config/config.h:
