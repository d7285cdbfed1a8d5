# rlm — build, test, bench.  `make run` and `make test` are the two commands the README promises.
PREFIX  ?= /usr/local
# libseccomp builds the local sandbox's system-call filter when rlm is built (host/seccomp.c,
# build/seccomp_gen): its BPF compiler handles every architecture and ABI correctly, which a
# hand-written filter easily gets wrong. rlm itself carries the finished program.
PKGS    := lua5.4 lua5.4-cjson libcurl libmicrohttpd
# Recursive (=) so pkg-config runs when a recipe needs it, after `deps` has installed the packages.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
# libcurl and libmicrohttpd are not linked into rlm: host/netlib.c opens them on first use, so a
# command that speaks no HTTP does not pay for loading the ~36 libraries they pull in.
NET_PKGS  := libcurl libmicrohttpd
PKG_LIBS   = $(shell pkg-config --libs $(filter-out $(NET_PKGS),$(PKGS))) -ldl
NET_LIBS   = $(shell pkg-config --libs $(NET_PKGS))
CFLAGS  ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Ihost -Ibuild $(PKG_CFLAGS) $(CFLAGS)
LIBS       = $(PKG_LIBS) -lm

HOST_SRC := $(filter-out host/main.c host/bin2c.c host/seccomp.c,$(wildcard host/*.c))
HOST_OBJ := $(HOST_SRC:host/%.c=build/%.o) build/seccomp_bpf.o
# The Lua bindings, one host/l<name>.c each, registered as rlm.core.<name>. Listed by hand: a
# plain C file whose name happens to start with "l" (loop.c) is not a binding.
BINDINGS := base64 daytona host http httpd json llm loop proc redact sandbox stdio sys
# The sandbox's Python driver ships as one file, lua/rlm/driver.py, joined from its parts in this
# order (the docstring, the protocol's reference, comes first); the parts are not embedded.
DRIVER_PARTS := $(addprefix lua/rlm/driver/,protocol.py transports.py capture.py listing.py \
  textfile.py cells.py session.py calls.py proxy.py startup.py)
# Everything else under lua/ and skills/ ships inside the binary ($(sort): C byte order).
EMBED    := $(sort lua/rlm/driver.py $(filter-out lua/rlm/driver/%,\
  $(shell find lua skills -type f ! -name '*~' ! -path '*/__pycache__/*' 2>/dev/null)))
CHECK_SRC := $(wildcard tests/check_*.c)
SUITES   := $(patsubst tests/check_%.c,%,$(filter-out tests/check_main.c,$(CHECK_SRC)))

.PHONY: all deps test-deps run test stress-test check luatest isolation pytest sdktest memcheck asan bench install uninstall clean docs
all: rlm build/rlm.1

# What building and `make run` need, and that with the test tools: .ci/deps --list run|test.
deps:
	@.ci/deps run

test-deps:
	@.ci/deps test

build/.dir:
	@mkdir -p build && touch $@

# bin2c compiles the lua/ modules with the liblua rlm links, so the bytecode always matches.
build/bin2c: host/bin2c.c host/fnv.h | build/.dir
	$(CC) -O2 $(shell pkg-config --cflags lua5.4) -o $@ $< $(shell pkg-config --libs lua5.4)

build/seccomp_gen: host/seccomp.c | build/.dir
	$(CC) -O2 -D_GNU_SOURCE -Wall -Wextra -o $@ $< $(shell pkg-config --cflags --libs libseccomp)

build/seccomp_bpf.c: build/seccomp_gen
	build/seccomp_gen > $@.tmp && mv $@.tmp $@

build/seccomp_bpf.o: build/seccomp_bpf.c host/seccomp.h
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

lua/rlm/driver.py: $(DRIVER_PARTS) Makefile
	awk 'FNR == 1 && NR > 1 { print "\n" } { print }' $(DRIVER_PARTS) > $@.tmp && mv $@.tmp $@

build/embedded.c: build/bin2c $(EMBED) | build/.dir
	build/bin2c $(EMBED) > $@

# One luaopen_rlm_core_<name> per binding, registered in package.preload as rlm.core.<name>.
build/bindings.h: Makefile | build/.dir
	@printf '%s\n' $(foreach b,$(BINDINGS),'BINDING($(b))') > $@

build/%.o: host/%.c $(wildcard host/*.h) build/bindings.h | build/.dir
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

build/embedded.o: build/embedded.c host/embed.h
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

build/libhost.a: $(HOST_OBJ) build/embedded.o
	$(AR) rcs $@ $^

rlm: build/main.o build/libhost.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The manual page and docs/cli.md come from the same help texts as `rlm help` (lua/rlm/help.lua).
build/rlm.1: rlm
	./rlm help --man > $@

docs: rlm
	./rlm help --markdown > docs/cli.md

# Check runner: every tests/check_<area>.c exports make_<area>_suite().
build/suites.h: $(CHECK_SRC) | build/.dir
	@printf '%s\n' $(foreach s,$(SUITES),'SUITE($(s))') > $@

build/check_all: $(CHECK_SRC) build/suites.h build/libhost.a tests/check_host.h
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $(CHECK_SRC) build/libhost.a $(LIBS) $(NET_LIBS) $(shell pkg-config --cflags --libs check 2>/dev/null)

run: deps rlm
	./rlm skill rlm-execute

check: build/check_all rlm
	build/check_all

luatest: rlm
	./rlm run tests/run.lua

# The attacker's tests of the local sandbox, as root and again as uid 65534 when run as root.
isolation: rlm
	tests/isolation/run

# A target that overruns its time limit fails saying so instead of sitting silent; its whole
# process group is stopped. The Lua tests bound each file themselves (tests/run.lua).
bounded = timeout --kill-after=30 $(1) $(2) || { s=$$?; [ $$s -ne 124 ] && [ $$s -ne 137 ] || \
  echo "$@: did not finish within $(1) s" >&2; exit $$s; }

pytest: lua/rlm/driver.py
	@$(call bounded,1200,/usr/bin/python3 -m unittest discover -s tests/py)

sdktest:
	@$(call bounded,1800,tests/sdk/run)

test: test-deps rlm
	@$(MAKE) --no-print-directory check asan luatest isolation pytest sdktest

# The whole gate on a loaded machine: `make test` while CPU hogs (four per core, at least 8)
# hold the load at 8 or more. The hogs end with the run, however it ends: the shell's trap
# stops them, and each also stops once that shell is gone (even killed by SIGKILL).
STRESS_HOGS ?= $(shell n=$$(nproc); echo $$((n * 4 > 8 ? n * 4 : 8)))
stress-test:
	@hogs=""; trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq $(STRESS_HOGS)); do \
	  sh -c 'while kill -0 '$$$$' 2>/dev/null; do :; done' & hogs="$$hogs $$!"; \
	done; \
	echo "stress-test: $(STRESS_HOGS) CPU hogs; load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	$(MAKE) --no-print-directory test; status=$$?; \
	echo "stress-test: make test ended with $$status; load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	exit $$status

# The C suites built whole with AddressSanitizer and UBSan (gcc's own; no extra package): out-of-
# bounds reads in the JSON checker and the wire parsers show here, where valgrind is too slow.
build/asan/check_all: $(CHECK_SRC) $(HOST_SRC) build/suites.h build/bindings.h build/embedded.c build/seccomp_bpf.c tests/check_host.h
	@mkdir -p build/asan
	$(CC) $(ALL_CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -Itests -o $@ \
	  $(CHECK_SRC) $(HOST_SRC) build/embedded.c build/seccomp_bpf.c $(LIBS) $(NET_LIBS) \
	  $(shell pkg-config --cflags --libs check 2>/dev/null)

asan: build/asan/check_all
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 build/asan/check_all

memcheck: build/check_all
	CK_FORK=no valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect \
	  --errors-for-leak-kinds=definite,indirect --error-exitcode=1 build/check_all

# The official SDKs the fidelity tests and the Daytona bench compare against (pinned).
tests/sdk/node_modules: tests/sdk/package.json tests/sdk/package-lock.json
	cd tests/sdk && npm ci --no-audit --no-fund --loglevel=error && touch node_modules

# The sub-call figure's floor: a bare libcurl loop (bench/curl_floor.c), linked as any client.
build/curl_floor: bench/curl_floor.c | build/.dir
	$(CC) -O2 -Wall -Wextra -Wno-unused-parameter -o $@ $< $(shell pkg-config --cflags --libs libcurl)

# The Daytona figure runs the official SDK under the pinned Node (tests/sdk/package.json).
# make bench BENCH_CONTEXT_MB=100,1024 adds the 1 GB context; BENCH=users runs one file.
BENCH_CONTEXT_MB ?= 100
bench: test-deps rlm tests/sdk/node_modules build/curl_floor
	PATH="$(CURDIR)/tests/sdk/node_modules/.bin:$$PATH" RLM_BENCH_CONTEXT_MB=$(BENCH_CONTEXT_MB) \
	  ./rlm run bench/run.lua $(BENCH)

install: rlm build/rlm.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 rlm $(DESTDIR)$(PREFIX)/bin/rlm
	install -m 644 build/rlm.1 $(DESTDIR)$(PREFIX)/share/man/man1/rlm.1
	@command -v man >/dev/null || echo "install: no man command here (Debian package man-db); \`rlm help\` prints the same manual"

# Removes what `make install` put there; what rlm itself writes: docs/configuration.md.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/rlm $(DESTDIR)$(PREFIX)/share/man/man1/rlm.1

clean:
	rm -rf build rlm lua/rlm/driver.py
