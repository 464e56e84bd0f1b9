# acttrace build. Sources are found by convention, so adding a file needs no Makefile edit:
#   runtime/*.c -> libatruntime.a     config/*.c -> libatconfig.a
#   shim/**/*.c shim/**/*.S -> libacttrace.so (with runtime + config linked in)
#   tools/*.c (but main.c) -> libattools.a; tools/main.c -> acttrace; tools/report/* -> the page
#     `acttrace report` writes (linked in by tools/report_assets.c)
#   tests/unit/test_*.c, tests/integration/test_*.c -> one Check binary each
#   tests/fixtures/*.c|*.cc -> one program each (prefix glib_/uv_/ev_/omp_/mhd_ picks the library)
#   tests/bench/bench_*.c -> one benchmark each        tests/fuzz/fuzz_*.c -> libFuzzer targets
#   tests/web/*.js -> the report's browser tests (node + Playwright), run by Check tests
# BUILD=dir picks the output folder; SAN=1 builds with ASan+UBSan (make check-asan does both).

VERSION := 0.9.0
BUILD ?= build
SAN ?=
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= gcc
CXX ?= g++

PKGS := check libffi
CPPFLAGS += -D_GNU_SOURCE -Iruntime -Iconfig -Ishim -Itools
CFLAGS ?= -O2 -g
# -fno-plt: calls into other libraries go through the GOT (bound at load time: -z now), not through
# a PLT stub on a code page of its own that every fork child maps afresh
CFLAGS += -std=gnu11 -Wall -Wextra -fPIC -pthread -fvisibility=hidden -fno-strict-aliasing -fno-plt
CXXFLAGS ?= -O2 -g
CXXFLAGS += -Wall -Wextra -fPIC -pthread
# libelf (symbol look-up) and Zydis (entry patching) serve the hooks
# libiberty's C++ demangler (static: the writer demangles the names it writes, runtime/demangle.c)
LDLIBS_COMMON := -lelf -lZydis -liberty -ldl -lpthread -lrt -lm
# libdw (acttrace check compares signatures with DWARF prototypes): the tools only, never the shim
TOOL_LIBS := -ldw
ifeq ($(SAN),1)
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  CFLAGS += $(SANFLAGS) -O1
  CXXFLAGS += $(SANFLAGS) -O1
  LDFLAGS += $(SANFLAGS)
endif

CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm)
FFI_LIBS = $(shell pkg-config --libs libffi 2>/dev/null || echo -lffi)

RUNTIME_SRC := $(wildcard runtime/*.c)
CONFIG_SRC := $(wildcard config/*.c)
SHIM_SRC := $(filter-out shim/hooks.c shim/hook/stub.c,$(wildcard shim/*.c shim/*/*.c))
SHIM_ASM := $(wildcard shim/*.S shim/*/*.S)
TOOLLIB_SRC := $(filter-out tools/main.c,$(wildcard tools/*.c))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
INTEG_SRC := $(wildcard tests/integration/test_*.c)
TESTLIB_SRC := $(wildcard tests/lib/*.c)
# tests/fixtures/lib*.c -> build/fixtures/lib*.so, the libraries of the hook fixtures (hk_*)
FIXTURE_LIB_SRC := $(wildcard tests/fixtures/lib*.c)
FIXTURE_C := $(filter-out $(FIXTURE_LIB_SRC),$(wildcard tests/fixtures/*.c))
FIXTURE_CXX := $(wildcard tests/fixtures/*.cc)
BENCH_SRC := $(wildcard tests/bench/bench_*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
DEMO_SRC := $(wildcard tests/demo/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
RUNTIME_OBJ := $(call obj,$(RUNTIME_SRC))
CONFIG_OBJ := $(call obj,$(CONFIG_SRC))
SHIM_OBJ := $(call obj,$(SHIM_SRC)) $(patsubst %.S,$(BUILD)/obj/%.o,$(SHIM_ASM))
TOOLLIB_OBJ := $(call obj,$(TOOLLIB_SRC))
TESTLIB_OBJ := $(call obj,$(TESTLIB_SRC))

LIBRUNTIME := $(BUILD)/libatruntime.a
LIBCONFIG := $(BUILD)/libatconfig.a
LIBTOOLS := $(BUILD)/libattools.a
SHIM_SO := $(if $(SHIM_SRC),$(BUILD)/libacttrace.so)
ACTTRACE := $(BUILD)/acttrace
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BIN := $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(INTEG_SRC))
FIXTURE_BIN := $(patsubst tests/fixtures/%.c,$(BUILD)/fixtures/%,$(FIXTURE_C)) \
               $(patsubst tests/fixtures/%.cc,$(BUILD)/fixtures/%,$(FIXTURE_CXX)) \
               $(patsubst tests/fixtures/%.c,$(BUILD)/fixtures/%.so,$(FIXTURE_LIB_SRC)) \
               $(if $(wildcard tests/fixtures/hk_calls.c),$(addprefix $(BUILD)/fixtures/hk_calls-,now nopie stripped dbg)) \
               $(if $(wildcard tests/fixtures/hk_matrix.c),$(addprefix $(BUILD)/fixtures/hk_matrix-,O0 O2 O3)) \
               $(if $(wildcard tests/fixtures/sa_args.c),$(addprefix $(BUILD)/fixtures/sa_args-,O0 O2)) \
               $(if $(wildcard tests/fixtures/liblocal_plug.c),$(addprefix $(BUILD)/fixtures/,liblocal_copy2.so liblocal_plug2.so))
BENCH_BIN := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
DEMO_BIN := $(patsubst tests/demo/%.c,$(BUILD)/demo/%,$(DEMO_SRC))

.PHONY: all deps consumers check check-unit check-integration check-asan check-traceevent bench demo fuzz install uninstall clean tests
all: $(LIBRUNTIME) $(SHIM_SO) $(ACTTRACE)

deps:
	@bash .ci/deps

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c $< -o $@
# the typed hook wrapper runs cleanups when a C++ exception unwinds through it
$(BUILD)/obj/shim/hook/ffiwrap.o: CFLAGS += -fexceptions
# The interposers in the order the file defines them (a server's per-request calls first), not the
# compiler's: their page (AT_PATH_IO) holds those calls whatever size the others take.
$(BUILD)/obj/shim/fdflow.o: CFLAGS += -fno-toplevel-reorder
# A hooked function's stub does not save vector/x87 state on every call: the code it runs (the hook's
# C code and what it calls in the runtime) never touches that state (runtime/xstate.h), and no loop
# becomes a call to libc's memcpy (which uses AVX). The flusher's serialisation keeps its vector code.
# test_harm_stub checks the result in the shim's disassembly.
NOVEC_CFLAGS = -mgeneral-regs-only -fno-tree-loop-distribute-patterns
NOVEC_OBJ = $(addprefix $(BUILD)/obj/runtime/,activity.o actpath.o tbuf.o flusher.o payload.o stack.o \
              tid.o clock.o xstate.o saferead.o) \
            $(addprefix $(BUILD)/obj/shim/,hookpath.o fdflow.o events.o stacks.o)
$(NOVEC_OBJ): CFLAGS += $(NOVEC_CFLAGS)
# The hooked call's logic reads no constant of its own from memory: a switch's jump or lookup table
# is on a read-only data page of its own, one more TLB miss per hooked call of a server between two system calls
# (shim/start.ld gathers its code on few pages).
PATH_OBJ = $(BUILD)/obj/shim/hookpath.o $(BUILD)/obj/config/signature.o
$(PATH_OBJ): CFLAGS += -fno-jump-tables -fno-tree-switch-conversion
# the report's page and script are linked in from their own files (.incbin)
REPORT_ASSETS := $(wildcard tools/report/*)
$(BUILD)/obj/tools/report_assets.o $(BUILD)/fuzz/obj/tools/report_assets.o: $(REPORT_ASSETS)
$(BUILD)/obj/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIBRUNTIME): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBCONFIG): $(CONFIG_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBTOOLS): $(TOOLLIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The shim links the runtime and config statically; only the interposed API is exported. libffi,
# libelf, Zydis and libgcc_s serve the hooks alone: the shim loads them with dlopen when a config has
# hooks (shim/hook/dynlib.c), by the sonames of the libraries it is built against.
soname = $(shell objdump -p $$($(CC) -print-file-name=lib$(1).so) 2>/dev/null | awk '/SONAME/ {print $$2}')
$(BUILD)/obj/shim/hook/dynlib.o: CPPFLAGS += -DAT_SONAME_FFI='"$(call soname,ffi)"' \
  -DAT_SONAME_ELF='"$(call soname,elf)"' -DAT_SONAME_ZYDIS='"$(call soname,Zydis)"'
# libiberty.a is linked in with its names kept local: the program's own copy (or a library's) is untouched
SHIM_LIBS := -Wl,--exclude-libs,libiberty.a -liberty -ldl -lpthread -lrt -lm
$(BUILD)/libacttrace.so: $(SHIM_OBJ) $(LIBCONFIG) $(LIBRUNTIME) shim/fork.ld shim/start.ld shim/versions.map
	$(CC) -shared $(LDFLAGS) -Wl,-z,nodelete -Wl,-z,now -Wl,--no-undefined -Wl,-T,shim/fork.ld -Wl,-T,shim/start.ld -Wl,--version-script=shim/versions.map -o $@ $(SHIM_OBJ) \
	  -Wl,--whole-archive $(LIBRUNTIME) -Wl,--no-whole-archive $(LIBCONFIG) $(SHIM_LIBS)

# `acttrace --version` (main.o is rebuilt when the Makefile, which holds VERSION, changes)
$(BUILD)/obj/tools/main.o: CPPFLAGS += -DAT_VERSION='"$(VERSION)"'
$(BUILD)/obj/tools/main.o: Makefile
$(ACTTRACE): $(BUILD)/obj/tools/main.o $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME)
	$(CC) $(LDFLAGS) -o $@ $^ $(FFI_LIBS) $(LDLIBS_COMMON) $(TOOL_LIBS)

TEST_DEFS = -DAT_BUILD_DIR='"$(abspath $(BUILD))"' -DAT_SOURCE_DIR='"$(abspath .)"'
$(BUILD)/tests/%: tests/unit/%.c $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib $(TEST_DEFS) $(CFLAGS) $(CHECK_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME) $(CHECK_LIBS) $(FFI_LIBS) $(LDLIBS_COMMON) $(TOOL_LIBS)
$(BUILD)/tests/%: tests/integration/%.c $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib $(TEST_DEFS) $(CFLAGS) $(CHECK_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME) $(CHECK_LIBS) $(FFI_LIBS) $(LDLIBS_COMMON) $(TOOL_LIBS)

# Fixture programs: the traced programs of the integration tests. They are ordinary programs and
# link nothing of ours (they use acttrace.h's weak symbols). The name prefix picks a library.
FIX_CFLAGS = -O1 -g -Wall -Wextra -pthread -Ishim
$(BUILD)/fixtures/glib_%: FIX_LIBS = $(shell pkg-config --cflags --libs glib-2.0 gio-2.0)
$(BUILD)/fixtures/uv_%: FIX_LIBS = $(shell pkg-config --cflags --libs libuv)
$(BUILD)/fixtures/ev_%: FIX_LIBS = $(shell pkg-config --cflags --libs libevent libevent_pthreads)
$(BUILD)/fixtures/omp_%: FIX_LIBS = -fopenmp
$(BUILD)/fixtures/glib_cbbench: FIX_LIBS = $(shell pkg-config --cflags --libs glib-2.0) -fopenmp
$(BUILD)/fixtures/mhd_%: FIX_LIBS = $(shell pkg-config --cflags --libs libmicrohttpd)
# hook fixtures: linked with libhkfx.so (GOT calls), built again with -z now, non-PIE and stripped
$(BUILD)/fixtures/lib%.so: tests/fixtures/lib%.c
	@mkdir -p $(dir $@)
	$(CC) $(FIX_CFLAGS) -shared -fPIC -o $@ $< $(LIB_LIBS)
# plugins for harm_local (dlopen RTLD_LOCAL): their libraries are theirs alone. liblocal_copy is a
# library two plugins bring a copy each of (same source, two sonames).
FIX_DIR_LINK = -L$(BUILD)/fixtures -Wl,-rpath,$(abspath $(BUILD)/fixtures)
$(BUILD)/fixtures/liblocal_glib.so: LIB_LIBS = $(shell pkg-config --cflags --libs glib-2.0 gio-2.0) -pthread
$(BUILD)/fixtures/liblocal_omp.so: LIB_LIBS = -fopenmp
$(BUILD)/fixtures/liblocal_copy.so: LIB_LIBS = -Wl,-soname,liblocal_copy.so
$(BUILD)/fixtures/liblocal_plug.so: LIB_LIBS = $(FIX_DIR_LINK) -llocal_copy
$(BUILD)/fixtures/liblocal_plug.so: $(BUILD)/fixtures/liblocal_copy.so
$(BUILD)/fixtures/liblocal_copy2.so: tests/fixtures/liblocal_copy.c
	$(CC) $(FIX_CFLAGS) -DLOCAL_COPY=2 -shared -fPIC -Wl,-soname,liblocal_copy2.so -o $@ $<
$(BUILD)/fixtures/liblocal_plug2.so: tests/fixtures/liblocal_plug.c $(BUILD)/fixtures/liblocal_copy2.so
	$(CC) $(FIX_CFLAGS) -DLOCAL_COPY=2 -shared -fPIC -o $@ $< $(FIX_DIR_LINK) -llocal_copy2
$(BUILD)/fixtures/hk_%: FIX_LIBS = -L$(BUILD)/fixtures -lhkfx -Wl,-rpath,$(abspath $(BUILD)/fixtures) -ldl
$(filter $(BUILD)/fixtures/hk_%,$(FIXTURE_BIN)): $(BUILD)/fixtures/libhkfx.so
$(BUILD)/fixtures/hk_calls-now: FIXTURE_FLAGS = -Wl,-z,now -Wl,-z,relro
$(BUILD)/fixtures/hk_calls-nopie: FIXTURE_FLAGS = -no-pie -fno-pie
$(BUILD)/fixtures/hk_calls-stripped: FIXTURE_FLAGS = -s
$(BUILD)/fixtures/hk_bench: FIXTURE_FLAGS = -O2 -fpatchable-function-entry=5
$(BUILD)/fixtures/hk_matrix: FIXTURE_FLAGS = -fopenmp
# functions in source order: caller() must be followed right by after_caller()
$(BUILD)/fixtures/stk_noreturn: FIXTURE_FLAGS = -fno-toplevel-reorder -fno-reorder-functions
# stripped, its symbols in a separate file found through .gnu_debuglink
$(BUILD)/fixtures/hk_calls-dbg: $(BUILD)/fixtures/hk_calls
	objcopy --only-keep-debug $< $@.debug
	objcopy --strip-all --add-gnu-debuglink=$@.debug $< $@
$(BUILD)/fixtures/hk_calls-%: tests/fixtures/hk_calls.c $(BUILD)/fixtures/libhkfx.so
	@mkdir -p $(dir $@)
	$(CC) $(FIX_CFLAGS) $(FIXTURE_FLAGS) -o $@ $< $(FIX_LIBS)
# hk_matrix at -O0/-O2/-O3, as two objects: callers in the hooked functions' file and in another
$(BUILD)/fixtures/hk_matrix-%: tests/fixtures/hk_matrix.c
	@mkdir -p $(dir $@)
	$(CC) $(FIX_CFLAGS) -$* -fopenmp -DHKM_PART=1 -c -o $@-1.o $<
	$(CC) $(FIX_CFLAGS) -$* -fopenmp -DHKM_PART=2 -c -o $@-2.o $<
	$(CC) $(FIX_CFLAGS) -$* -fopenmp -o $@ $@-1.o $@-2.o
# stack-argument harm fixtures (sa_*): linked with libsafx.so (GOT calls); sa_args again at -O0 and
# -O2; sa_nest and sa_prolog name their frames with dladdr (-rdynamic); sa_tail makes tail calls (-O2)
$(BUILD)/fixtures/sa_%: FIX_LIBS = -L$(BUILD)/fixtures -lsafx -Wl,-rpath,$(abspath $(BUILD)/fixtures)
$(filter $(BUILD)/fixtures/sa_%,$(FIXTURE_BIN)): $(BUILD)/fixtures/libsafx.so
$(BUILD)/fixtures/libsafx.so $(filter $(BUILD)/fixtures/sa_args%,$(FIXTURE_BIN)): tests/fixtures/sa_funcs.h
$(BUILD)/fixtures/sa_nest $(BUILD)/fixtures/sa_prolog: FIXTURE_FLAGS = -rdynamic
$(BUILD)/fixtures/sa_tail: FIXTURE_FLAGS = -O2
$(BUILD)/fixtures/static_exit: FIXTURE_FLAGS = -static
$(BUILD)/fixtures/sa_args-%: tests/fixtures/sa_args.c
	@mkdir -p $(dir $@)
	$(CC) $(FIX_CFLAGS) -$* -o $@ $< $(FIX_LIBS)
$(BUILD)/fixtures/%: tests/fixtures/%.c
	@mkdir -p $(dir $@)
	$(CC) $(FIX_CFLAGS) $(FIXTURE_FLAGS) -o $@ $< $(FIX_LIBS) -lrt
$(BUILD)/fixtures/%: tests/fixtures/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(FIX_CFLAGS) $(FIXTURE_FLAGS) -o $@ $< $(FIX_LIBS)

$(BUILD)/bench/%: tests/bench/%.c $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib $(TEST_DEFS) $(CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(TESTLIB_OBJ) $(LIBTOOLS) $(LIBCONFIG) $(LIBRUNTIME) $(FFI_LIBS) $(LDLIBS_COMMON) $(TOOL_LIBS)

$(BUILD)/demo/%: tests/demo/%.c $(LIBRUNTIME)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBRUNTIME) $(LDLIBS_COMMON)

tests: all $(UNIT_BIN) $(INTEG_BIN) $(FIXTURE_BIN)

# The real programs test_export_consumers reads the exports with (tests/consumers: speedscope's app,
# playwright-core to drive Debian's Chromium, ajv and the Trace Event Format's types), pinned by its
# package-lock.json and installed with npm ci. A failed install is said; outside CI the checks then
# skip saying why, under CI (AT_TRACEEVENT_REQUIRED=1) the install failing fails the run.
CONSUMERS_STAMP := tests/consumers/node_modules/.package-lock.json
consumers: $(CONSUMERS_STAMP)
$(CONSUMERS_STAMP): tests/consumers/package.json tests/consumers/package-lock.json
	@cd tests/consumers && npm ci --no-audit --no-fund --loglevel=error >/dev/null || { \
	  echo "acttrace: npm ci in tests/consumers failed: the export consumer checks cannot run" >&2; \
	  [ "$${AT_TRACEEVENT_REQUIRED:-0}" != 1 ]; }
# The browser tests of `acttrace report` (tests/web: node scripts that drive Debian's Chromium with
# playwright-core) need their node modules, installed exactly as tests/web/package-lock.json pins
# them. Without npm or its registry the tests say what is missing (CI, AT_TRACEEVENT_REQUIRED=1,
# fails them then).
WEB_DEPS := tests/web/node_modules/.package-lock.json
$(WEB_DEPS): tests/web/package.json tests/web/package-lock.json
	@cd tests/web && npm ci --no-audit --no-fund --loglevel=error >/dev/null \
	  || echo "acttrace: npm ci failed in tests/web: the report's browser tests will say what is missing" >&2

# The test command of the README. Prints Check's lines per binary and a closing
# "N passed, N failed" line over all of them. The traces the tests write are kept and read by
# TraceEvent itself at the end (tests/compat/run.sh; each file and TraceEvent version counts one).
TE_KEEP := $(abspath $(BUILD))/compat/traces
check: deps consumers
	@$(MAKE) --no-print-directory tests $(FUZZ_BIN) $(WEB_DEPS)
	@rm -rf $(TE_KEEP) && mkdir -p $(TE_KEEP)
	@AT_KEEP_TRACES=$(TE_KEEP) AT_KEEP_TRACES_OF="$(notdir $(INTEG_BIN))" AT_FUZZ_SECONDS=$(FUZZ_CHECK_SECONDS) \
	  bash tests/run-tests.sh $(BUILD) $(UNIT_BIN) $(INTEG_BIN) $(FUZZ_BIN)

# TraceEvent (3.1.21, the oldest that reads Universal.System, and the newest served; override with
# TRACEEVENT_VERSIONS) reads every trace the integration tests write, the demo's and the runtime's
# samples: tests/compat. TE_TESTS picks the tests whose traces are read.
TE_TESTS ?= $(INTEG_BIN)
check-traceevent: deps
	@$(MAKE) --no-print-directory tests
	@rm -rf $(TE_KEEP) && mkdir -p $(TE_KEEP)
	@bash tests/compat/run.sh $(BUILD) $(TE_KEEP) $(TE_TESTS)

check-asan: deps consumers
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=1 tests $(WEB_DEPS)
	@ACTTRACE_ASAN=1 bash tests/run-tests.sh build-asan $(patsubst $(BUILD)/%,build-asan/%,$(UNIT_BIN) $(INTEG_BIN))

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN) $(FIXTURE_BIN)
	@bash tests/bench/run.sh $(BUILD) $(BENCH_BIN)

# libFuzzer targets: clang, with ASan and UBSan (UB aborts so the fuzzer sees it). The code under
# test is built once per build folder into its own objects. `make fuzz` runs each target for
# FUZZ_SECONDS; `make check` runs each for FUZZ_CHECK_SECONDS (tests/run-tests.sh counts them). Each
# target's seeds are in tests/fuzz/seeds/<target>; new inputs go to $(BUILD)/fuzz/corpus-<target>.
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 10
FUZZ_CC ?= clang
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=undefined
FUZZ_LIB_SRC := $(TOOLLIB_SRC) $(CONFIG_SRC) $(RUNTIME_SRC)
FUZZ_LIB := $(BUILD)/fuzz/libatfuzz.a
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@
$(FUZZ_LIB): $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_LIB_SRC))
	rm -f $@ && ar rcs $@ $^
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_LIB) \
	  $(FFI_LIBS) $(LDLIBS_COMMON) $(TOOL_LIBS)
fuzz: deps $(FUZZ_BIN)
	@AT_FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/run-tests.sh $(BUILD) $(FUZZ_BIN)

demo: deps
	@$(MAKE) --no-print-directory all $(DEMO_BIN) $(BUILD)/fixtures/demo_server
	@bash tests/demo/run.sh $(BUILD)

# make install [PREFIX=/usr/local] [DESTDIR=]: the tool, the shim beside it in ../lib (where `acttrace
# run` looks), the markers header, the man pages and the example configs. make uninstall removes
# exactly these files (the same lists), then the folders of our own it made, when empty.
MANDIR ?= $(PREFIX)/share/man
EXAMPLEDIR ?= $(PREFIX)/share/acttrace/examples
MAN1 := $(wildcard man/*.1)
MAN5 := $(wildcard man/*.5)
EXAMPLES := $(wildcard config/examples/*.conf)
INSTALLED := $(DESTDIR)$(PREFIX)/bin/acttrace $(if $(SHIM_SO),$(DESTDIR)$(PREFIX)/lib/libacttrace.so) \
  $(DESTDIR)$(PREFIX)/include/acttrace.h $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
  $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5))) $(addprefix $(DESTDIR)$(EXAMPLEDIR)/,$(notdir $(EXAMPLES)))
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(EXAMPLEDIR)
	install -m 755 $(ACTTRACE) $(DESTDIR)$(PREFIX)/bin/
	$(if $(SHIM_SO),install -m 755 $(SHIM_SO) $(DESTDIR)$(PREFIX)/lib/)
	install -m 644 shim/acttrace.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/
	install -m 644 $(EXAMPLES) $(DESTDIR)$(EXAMPLEDIR)/

uninstall:
	rm -f $(INSTALLED)
	rmdir $(DESTDIR)$(EXAMPLEDIR) $(DESTDIR)$(PREFIX)/share/acttrace 2>/dev/null || true

clean:
	rm -rf build build-asan tests/consumers/node_modules

-include $(shell find $(BUILD)/obj $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)
