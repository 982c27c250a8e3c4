# fp8lab — build, test, bench, demo, sanitize.  `make help` lists the targets.
# Probes compile and link; override any of them: CUDA=0|1|auto, MPI=0|1|auto, NCCL=0|1|auto.

BUILD    ?= build
# Every compile and link below depends on $(FLAGS_STAMP): the effective flags (CC CFLAGS LUA_CFLAGS LDFLAGS LDLIBS
# NVCC NVCCFLAGS, probes included), written at the end of this file and only when they change. So a new setting
# (`make MPI=1`) or a library installed since the last build (readline, MPI) rebuilds what it changes.
# $(BUILD)/make.args keeps the command-line settings that produced the stamp (tests/spec/parity_install_spec.lua
# passes them on, so its `make install` rebuilds nothing).
FLAGS_STAMP := $(BUILD)/flags.stamp
# a link's inputs: its prerequisites less the stamp
LINK_IN = $(filter-out $(FLAGS_STAMP),$^)
CC       ?= gcc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA     ?= auto
# -O2 with GCC's dynamic vectoriser cost model: the portable loops (the FP8 cast, GELU, LayerNorm, ...) are
# written for the vectoriser, and on CPUs without AVX-512 they are the ones that run. GCC 12's -O2 default, the
# "very cheap" model, refuses any loop that needs an aliasing check or a remainder, which left the FP8 cast
# scalar there: 0.17 elements/ns on one Zen 3 core against 1.4 with this (docs/performance.md, "CPUs without
# AVX-512 (Zen 3)"). Floating-point results do not change: without -ffast-math no sum is reordered.
OPT      ?= -O2 -fvect-cost-model=dynamic
SAN      ?=
LUA_CFLAGS := $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS   := $(shell pkg-config --libs lua5.4 2>/dev/null || echo -llua5.4)

# x86-64-v3 (AVX2/FMA/F16C) is the baseline; AVX-512 paths are chosen at run time.
ARCHFLAGS ?= -march=x86-64-v3 -mtune=native
CFLAGS   ?= $(OPT) -g
# -fno-math-errno: nothing here reads errno after a libm call, and without it GCC keeps sqrtf's errno branch in
# the AdamW and MS-AMP Adam loops, so they ran scalar (vsqrtss: 3.6 ms of the GPT step). Only elementwise loops
# vectorise anew with it (those two and the unary sqrt, by -fopt-info-vec), so no result changes.
CFLAGS   += -std=c11 -D_GNU_SOURCE -fno-trapping-math -fno-math-errno -Wall -Wextra -Wno-unused-parameter -fopenmp $(ARCHFLAGS) -Icore
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif
LDLIBS   += -ldnnl -lm -lpthread -fopenmp

# ---- feature probes (compile + link) ----------------------------------------------------
probe = $(shell printf '$(2)' > $(BUILD)/probe_$(1).c 2>/dev/null; \
          $(CC) $(BUILD)/probe_$(1).c -o $(BUILD)/probe_$(1) $(3) >/dev/null 2>&1 && echo 1 || echo 0)
$(shell mkdir -p $(BUILD))
HASH := \#
HAVE_DNNL := $(call probe,dnnl,$(HASH)include <dnnl.h>\nint main(void){return dnnl_version()==0;},-ldnnl)
HAVE_READLINE := $(call probe,rl,$(HASH)include <stdio.h>\n$(HASH)include <readline/readline.h>\nint main(void){return rl_initialize();},-lreadline)

# The two nvcc probes (a kernel compiled and linked; cublasLt.h compiled) take ~2-3 CPU-s each, and every make ran
# them: make test twice (its own make and the build it starts), each spec that runs make once more. Their results are
# kept in $(BUILD)/probe_<name>.cache under a key of what they read: nvcc, the host compilers it calls, the CUDA
# headers and runtime library they include and link (path, size, mtime; a missing one is in the key as stat's error),
# so a CUDA or compiler installed, removed or upgraded since runs the probe again.
eq = $(and $(findstring $(1),$(2)),$(findstring $(2),$(1)))
NVCC_KEY = $(strip $(shell d=$$(dirname $(NVCC))/..; stat -L -c '%n %s %Y' $(NVCC) $$d/include/cuda_runtime.h \
  $$d/include/cublasLt.h $$d/lib64/libcudart_static.a $$(command -v gcc g++ cc c++) 2>&1))
NVCC_PROBE_CUDA = printf '__global__ void k(){}\nint main(){k<<<1,1>>>();return 0;}\n' > $(BUILD)/probe_cuda.cu && \
  $(NVCC) $(BUILD)/probe_cuda.cu -o $(BUILD)/probe_cuda >/dev/null 2>&1 && echo 1 || echo 0
NVCC_PROBE_CUBLASLT = printf '$(HASH)include <cublasLt.h>\nint main(){return 0;}\n' > $(BUILD)/probe_cublaslt.cu && \
  $(NVCC) -c $(BUILD)/probe_cublaslt.cu -o $(BUILD)/probe_cublaslt.o >/dev/null 2>&1 && echo 1 || echo 0
# $(call nvcc_cached,NAME,VARIABLE): the cached result of probe NAME, or the shell command in VARIABLE run and kept
nvcc_cached = $(eval _nk := $(NVCC_KEY))$(eval _nc := $(file <$(BUILD)/probe_$(1).cache))$(strip \
  $(if $(call eq,$(wordlist 2,100000,$(_nc)),$(_nk)),$(firstword $(_nc)),\
  $(eval _nr := $(shell $($(2))))$(file >$(BUILD)/probe_$(1).cache,$(_nr) $(_nk))$(_nr)))

ifeq ($(CUDA),auto)
  ifneq ($(NVCC),)
    CUDA_ON := $(call nvcc_cached,cuda,NVCC_PROBE_CUDA)
  else
    CUDA_ON := 0
  endif
else
  CUDA_ON := $(CUDA)
endif

# MPI: OpenMPI's (or any) mpi.h and libmpi, found through mpicc's own flags when it exists.
MPI      ?= auto
MPI_CFLAGS ?= $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   ?= $(or $(shell mpicc --showme:link 2>/dev/null),-lmpi)
ifeq ($(MPI),auto)
  MPI_ON := $(call probe,mpi,$(HASH)include <mpi.h>\nint main(void){int v;return MPI_Initialized(&v);},$(MPI_CFLAGS) $(MPI_LIBS))
else
  MPI_ON := $(MPI)
endif
ifeq ($(MPI_ON),1)
  CFLAGS += -DFL_HAVE_MPI $(MPI_CFLAGS)
  LDLIBS += $(MPI_LIBS)
endif

# cuBLASLt (kernels/gemm_lt.cu): its header must compile with nvcc; the library itself is loaded at run
# time. CUBLASLT=0 builds the GEMMs' "not built in" path.
CUBLASLT ?= auto
ifeq ($(CUDA_ON),1)
  ifeq ($(CUBLASLT),auto)
    HAVE_CUBLASLT := $(call nvcc_cached,cublaslt,NVCC_PROBE_CUBLASLT)
  else
    HAVE_CUBLASLT := $(CUBLASLT)
  endif
else
  HAVE_CUBLASLT := 0
endif

ifeq ($(HAVE_READLINE),1)
  CFLAGS += -DFL_HAVE_READLINE
  LDLIBS += -lreadline
endif

CORE_SRC := $(wildcard core/*.c core/cpu/*.c)
LUA_C    := $(wildcard lua/*.c)
LUA_SRC  := $(shell find lua/fp8 -name '*.lua' 2>/dev/null | sort)
TEST_C   := $(wildcard tests/c/*.c)
CU_SRC   := $(wildcard kernels/*.cu)

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
LUA_OBJ  := $(LUA_C:%.c=$(BUILD)/%.o) $(BUILD)/gen/lua_embed.o

ifeq ($(CUDA_ON),1)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  # SASS for sm_89 (Ada) and sm_90 (Hopper), and compute_90 PTX that the driver compiles for later GPUs. sm_90, not
  # sm_90a: no kernel uses an sm_90a-only instruction (wgmma, setmaxnreg, TMA multicast), the sm_90a SASS of every
  # kernel was sm_90's instruction for instruction (docs/performance.md, "make test's time (stop 97)"), and one
  # -gencode for sm_90 and compute_90 runs nvcc's front end (cicc) once where two did (~12% of a file's nvcc time).
  NVCCFLAGS ?= -O2 -std=c++20 -Icore -gencode arch=compute_89,code=sm_89 \
               '-gencode=arch=compute_90,code=[sm_90,compute_90]' -Xcompiler -fPIC
  CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.o)
  CFLAGS   += -DFL_HAVE_CUDA
  ifeq ($(HAVE_CUBLASLT),1)
    CFLAGS    += -DFL_HAVE_CUBLASLT
    NVCCFLAGS += -DFL_HAVE_CUBLASLT
  endif
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else
  CU_OBJ   :=
endif

# NCCL (GPU collectives, kernels/nccl_comm.cu): only with CUDA; NCCL=0|1|auto.
NCCL     ?= auto
ifeq ($(CUDA_ON),1)
  ifeq ($(NCCL),auto)
    NCCL_ON := $(call probe,nccl,$(HASH)include <nccl.h>\nint main(void){int v;return ncclGetVersion(&v);},-I$(CUDA_HOME)/include -L$(CUDA_HOME)/lib64 -lnccl)
  else
    NCCL_ON := $(NCCL)
  endif
else
  NCCL_ON := 0
endif
ifeq ($(NCCL_ON),1)
  CFLAGS    += -DFL_HAVE_NCCL
  NVCCFLAGS += -DFL_HAVE_NCCL
  LDLIBS    += -L$(CUDA_HOME)/lib64 -lnccl
endif

BIN := $(BUILD)/fp8lab

.PHONY: tour all deps test test-c test-lua test-exhaustive test-gpu bench demo sanitize clean help probes
all: probes $(BIN)

probes:
	@printf '  %s oneDNN\n' "$(if $(filter 1,$(HAVE_DNNL)),✓,✗ (install libdnnl-dev))"
	@printf '  %s readline\n' "$(if $(filter 1,$(HAVE_READLINE)),✓,✗ (plain line input))"
	@printf '  %s CUDA%s\n' "$(if $(filter 1,$(CUDA_ON)),✓,✗)" "$(if $(filter 1,$(CUDA_ON)), ($(NVCC)),)"
	@printf '  %s MPI%s\n' "$(if $(filter 1,$(MPI_ON)),✓,✗)" "$(if $(filter 1,$(MPI_ON)),,$(if $(filter auto,$(MPI)), (install libopenmpi-dev; single process only), (MPI=$(MPI); single process only)))"
	@printf '  %s NCCL%s\n' "$(if $(filter 1,$(NCCL_ON)),✓,✗)" "$(if $(filter 1,$(NCCL_ON)), (one process on one GPU tested; never run across GPUs),)"
	@printf '  %s cuBLASLt\n' "$(if $(filter 1,$(HAVE_CUBLASLT)),✓,✗)"

deps:
	@bash scripts/install-deps.sh

$(BUILD)/%.o: %.c $(wildcard core/*.h core/cpu/*.h lua/*.h kernels/*.h tests/c/*.h scripts/*.h) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LUA_CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(wildcard core/*.h kernels/*.h kernels/*.cuh) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Lua sources are embedded into the binary (module name from the path: lua/fp8/nn/init.lua -> fp8.nn).
$(BUILD)/embed: scripts/embed.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) -O1 -o $@ $<
$(BUILD)/gen/lua_embed.c: $(LUA_SRC) $(BUILD)/embed
	@mkdir -p $(dir $@)
	$(BUILD)/embed lua $(LUA_SRC) > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/lua_embed.o: $(BUILD)/gen/lua_embed.c $(FLAGS_STAMP)
	$(CC) -O1 -c $< -o $@

$(BIN): $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LUA_LIBS) $(LDLIBS)

$(BUILD)/test_core: $(TEST_C:%.c=$(BUILD)/%.o) $(CORE_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LDLIBS)

# ---- tests --------------------------------------------------------------------------------
# Each runner prints "N passed, N failed"; scripts/run-tests.sh adds them up. The packages go in first and the
# build is a second make, so its probes see them (this make's probes ran before the install).
# The benchmark programs are built too (not run), so that one that no longer links fails here, not in `make bench`.
BENCH_C := $(BUILD)/bench_quantize $(BUILD)/bench_attn $(BUILD)/bench_fp8_gemm $(BUILD)/bench_peak $(BUILD)/bench_passes
# make test samples every 61st fp32 pattern in the casts' exhaustive tests, and those whose low 12 bits are 0, 1 or all
# ones (the ties, ±0, ±inf; tests/c/test_format.c's block_patterns) (FL_TEST_QUICK=1: ~73 M of the 2^32; all of them
# were most of the C tests' time); make test-exhaustive runs all of them, as CI does (.ci/run). FL_TEST_QUICK=0 in the
# environment makes make test run all of them too. run-tests.sh stops a part that runs past its time limit
# (FL_TEST_TIMEOUT_C, FL_TEST_TIMEOUT_SPECS seconds; README) and fails the run.
# The builds that test, sanitize and demo start run one job a core (`nproc`) unless make was given -j itself (then its
# jobserver is shared as usual): .ci/run and the README call plain `make test`, whose build ran one compile at a time
# (on a 2-core Zen 3, ~320 of a clean clone's 646 s of make test; stop 103).
SUBJOBS = j=; case " $$MAKEFLAGS " in *" -j"*) ;; *) j=-j$$(nproc 2>/dev/null || echo 1) ;; esac;
test: deps
	@bash scripts/check-omp.sh
	@bash scripts/install-deps.sh test
	@$(SUBJOBS) $(MAKE) --no-print-directory $$j all $(BUILD)/test_core $(BENCH_C)
	@FL_TEST_QUICK=$${FL_TEST_QUICK:-1} bash scripts/run-tests.sh $(BUILD)

test-exhaustive: $(BUILD)/test_core
	FL_TEST_QUICK=0 $(BUILD)/test_core format_exhaustive

test-c: $(BUILD)/test_core
	$(BUILD)/test_core

test-lua: $(BIN)
	$(BIN) tests/busted.lua tests/spec

test-gpu: all $(BUILD)/test_core
	@bash scripts/run-tests.sh $(BUILD) gpu

sanitize:
	@$(SUBJOBS) $(MAKE) $$j BUILD=build-san SAN=1 OPT=-O1 CUDA=0 all build-san/test_core
	FL_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  bash scripts/run-tests.sh build-san

bench: all
	@bash scripts/install-deps.sh bench
	@bash scripts/bench.sh $(BUILD)

# The main job: train the Fashion-MNIST MLP in FP8 with the default recipe (MS-AMP O2 unless
# FP8LAB_FP8_BACKEND or a config file says otherwise; needs Debian's dataset-fashion-mnist, installed by deps).
demo: deps
	@$(SUBJOBS) $(MAKE) --no-print-directory $$j all
	$(BIN) scripts/train_fashion_mnist.lua --mixed-precision fp8

# A guided tour of the FP8 formats at the prompt.
tour: all
	$(BIN) scripts/tour.lua

clean:
	@case '$(BUILD)' in ''|.|..|/|./|../) echo "make clean: refusing BUILD='$(BUILD)'" >&2; exit 1;; esac
	rm -rf '$(BUILD)' build-san

help:
	@echo "make [all] | deps | test | test-exhaustive | test-c | test-lua | test-gpu | demo | tour | bench | bench-gpu | sanitize | analyze | fuzz"
	@echo "     | man | install | uninstall | clean | probes | cflags"
	@echo "  (BUILD=build; CUDA=auto|0|1, MPI=auto|0|1, NCCL=auto|0|1, CUBLASLT=auto|0|1; FUZZ_TIME=60; PREFIX=/usr/local DESTDIR=)"

# ---- numerics helper: quantize benchmark (scripts/bench_quantize.c; run by scripts/bench.sh) ----
# Links only the objects it uses so it builds even while other core files are in progress.
$(BUILD)/bench_quantize: scripts/bench_quantize.c $(BUILD)/core/format.o $(BUILD)/core/error.o $(BUILD)/core/cpu_isa.o \
                        $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -o $@ $(LINK_IN) $(LDFLAGS) -lm -fopenmp

# ---- CPU bf16 attention per call, per-head kernels vs batched GEMMs (scripts/bench_attn.c) ----
$(BUILD)/bench_attn: $(BUILD)/scripts/bench_attn.o $(CORE_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LDLIBS)

# ---- the CPU's arithmetic limits (scripts/bench_peak.c; run by scripts/bench_train.sh): fp32 FMA and bf16 dot ----
$(BUILD)/bench_peak: scripts/bench_peak.c scripts/peak.h scripts/bench_util.h core/cpu/cpu_amx.h $(FLAGS_STAMP)
	$(CC) -O2 -fopenmp -Icore -o $@ $<

# ---- the CPU FP8 GEMM's two paths (scripts/bench_fp8_gemm.c): decode + oneDNN vs cpu_fp8_mm.c on the char
# GPT's twelve GEMMs (or those GEMMS names); run as OMP_NUM_THREADS=T build/bench_fp8_gemm [REPS [MODE [GEMMS]]]; MODE bf16: the fp32 and bf16
# GEMMs through the device's matmul entry, oneDNN against fl_cpu_fma_mm ----
$(BUILD)/bench_fp8_gemm: $(BUILD)/scripts/bench_fp8_gemm.o $(CORE_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LDLIBS)

# ---- the passes over a layer's activations besides its GEMMs (scripts/bench_passes.c): the fused casts, the bias
# gradient, LayerNorm with its cast and its backward;
# run as OMP_NUM_THREADS=T build/bench_passes [ROWS COLS R [cold]] ----
$(BUILD)/bench_passes: $(BUILD)/scripts/bench_passes.o $(CORE_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LDLIBS)

# ---- data helper: zlib for the IDX .gz reader (core/data.c) ----
LDLIBS   += -lz

# ---- `make analyze`: clang's static analyzer over core/ and lua/ (scripts/analyze.sh; warnings read and found
# false are listed with the reason in scripts/analyze.reviewed; a new one fails). Installs clang like `make fuzz`.
.PHONY: analyze cflags
analyze:
	@bash scripts/install-deps.sh fuzz
	bash scripts/analyze.sh

# The C compiler's flags of this build, features found included (scripts/analyze.sh compiles with them).
cflags:
	@echo $(CFLAGS) $(LUA_CFLAGS)

# ---- config helper: libyaml for config.yaml (core/config.c); `make fuzz` runs its loader under
# libFuzzer (clang; scripts/install-deps.sh fuzz installs it) for FUZZ_TIME seconds ----
LDLIBS   += -lyaml
FUZZ_TIME ?= 60
# `make fuzz` runs every loader target for FUZZ_TIME seconds each (keep it short while iterating;
# `make fuzz FUZZ_TIME=600` is the ten-minute bar of docs/robustness.md), then the full API sweep.
.PHONY: fuzz
FUZZ_RUN = -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(BUILD)/fuzz-
fuzz: $(BUILD)/fuzz_config $(BUILD)/fuzz_idx $(BUILD)/fuzz_text $(BUILD)/fuzz_lua_load $(BIN)
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-idx $(BUILD)/fuzz-corpus-text $(BUILD)/fuzz-corpus-lua
	$(BUILD)/fuzz_config $(FUZZ_RUN) -max_len=8192 -dict=tests/fuzz/config.dict \
	  $(BUILD)/fuzz-corpus tests/fuzz/corpus tests/data/config/good tests/data/config/bad
	$(BUILD)/fuzz_idx $(FUZZ_RUN) -max_len=4096 $(BUILD)/fuzz-corpus-idx tests/fuzz/corpus_idx
	$(BUILD)/fuzz_text $(FUZZ_RUN) -max_len=8192 $(BUILD)/fuzz-corpus-text tests/fuzz/corpus_text
	$(BUILD)/fuzz_lua_load $(FUZZ_RUN) -max_len=4096 $(BUILD)/fuzz-corpus-lua tests/fuzz/corpus_lua
	$(BIN) tests/fuzz/api_sweep.lua --messages
$(BUILD)/fuzz_config: tests/fuzz/fuzz_config.c core/config.c core/settings.c core/error.c core/fileio.c core/config.h core/settings.h core/error.h $(FLAGS_STAMP)
	@bash scripts/install-deps.sh fuzz
	clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Icore -o $@ \
	  tests/fuzz/fuzz_config.c core/config.c core/settings.c core/error.c core/fileio.c -lyaml -lm

# The IDX and text targets link the whole core, built once with clang and the sanitizers.
FUZZ_CFLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -fopenmp $(ARCHFLAGS) -Icore -fsanitize=address,undefined
FUZZ_CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/fuzz/%.o)
$(BUILD)/fuzz/%.o: %.c $(wildcard core/*.h core/cpu/*.h) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(BUILD)/fuzz_idx $(BUILD)/fuzz_text: $(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_CORE_OBJ) $(FLAGS_STAMP)
	@bash scripts/install-deps.sh fuzz
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $(LINK_IN) -ldnnl -lz -lm -lyaml -lcjson
$(BUILD)/fuzz_lua_load: tests/fuzz/fuzz_lua_load.c lua/l_textonly.c $(FLAGS_STAMP)
	@bash scripts/install-deps.sh fuzz
	clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LUA_CFLAGS) -Icore -o $@ $(LINK_IN) $(LUA_LIBS)

# ---- GPU benchmark (scripts/bench_gpu.cu): FP8 vs bf16 cuBLASLt GEMMs and the cast kernels next to a
# device copy; on a GPU it rewrites the "## GPU" section of docs/performance.md, without one it says so ----
.PHONY: bench-gpu
ifeq ($(CUDA_ON),1)
bench-gpu: $(BUILD)/bench_gpu
	@bash scripts/bench_gpu.sh $(BUILD)
$(BUILD)/bench_gpu: $(BUILD)/scripts/bench_gpu.o $(CORE_OBJ) $(CU_OBJ) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(LINK_IN) $(LDLIBS)
else
bench-gpu:
	@echo "no GPU: fp8lab was built without CUDA (CUDA=0 or no working nvcc)"
endif

# ---- install: `make install PREFIX=/usr/local DESTDIR=...` puts the binary, the Lua library (also
# embedded in the binary; installed for reading and FP8LAB_LUA_DIR), the example scripts and lessons, the docs (with
# their images) and
# the man page (generated from docs/cli.md and docs/config.md) where Debian expects them; `make uninstall`.
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(PREFIX)/bin
LUADIR  := $(PREFIX)/share/lua/5.4
DATADIR := $(PREFIX)/share/fp8lab
DOCDIR  := $(PREFIX)/share/doc/fp8lab
MANDIR  := $(PREFIX)/share/man/man1
INST_SCRIPTS := $(wildcard scripts/*.lua)
INST_LESSONS := $(wildcard scripts/lessons/*.lua)
INST_DOCS    := $(wildcard docs/*.md) README.md
INST_IMG     := $(wildcard docs/img/*.png)
.PHONY: install uninstall man
man: $(BUILD)/fp8lab.1
$(BUILD)/fp8lab.1: scripts/gen_man.lua docs/cli.md docs/config.md $(BIN)
	$(BIN) scripts/gen_man.lua docs/cli.md docs/config.md > $@.tmp && mv $@.tmp $@
install: $(BIN) $(BUILD)/fp8lab.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(DATADIR)/scripts/lessons $(DESTDIR)$(DOCDIR)/img
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/fp8lab
	for f in $(LUA_SRC); do install -D -m 644 $$f $(DESTDIR)$(LUADIR)/$${f#lua/} || exit 1; done
	install -m 644 $(INST_SCRIPTS) $(DESTDIR)$(DATADIR)/scripts/
	install -m 644 $(INST_LESSONS) $(DESTDIR)$(DATADIR)/scripts/lessons/
	install -m 644 $(INST_DOCS) $(DESTDIR)$(DOCDIR)/
	$(if $(INST_IMG),install -m 644 $(INST_IMG) $(DESTDIR)$(DOCDIR)/img/)
	install -m 644 $(BUILD)/fp8lab.1 $(DESTDIR)$(MANDIR)/fp8lab.1
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/fp8lab $(DESTDIR)$(MANDIR)/fp8lab.1
	for f in $(LUA_SRC); do rm -f $(DESTDIR)$(LUADIR)/$${f#lua/}; done
	rm -rf $(DESTDIR)$(LUADIR)/fp8 $(DESTDIR)$(DATADIR) $(DESTDIR)$(DOCDIR)

# ---- checkpoint helper: cJSON for safetensors headers (core/checkpoint.c); `make fuzz` also runs the
# safetensors reader under libFuzzer (tests/fuzz/fuzz_safetensors.c) ----
LDLIBS   += -lcjson
.PHONY: fuzz-safetensors
fuzz: fuzz-safetensors
fuzz-safetensors: $(BUILD)/fuzz_safetensors
	@mkdir -p $(BUILD)/fuzz-st-corpus
	$(BUILD)/fuzz_safetensors -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	  -dict=tests/fuzz/safetensors.dict -artifact_prefix=$(BUILD)/fuzz-st- $(BUILD)/fuzz-st-corpus tests/data/safetensors
$(BUILD)/fuzz_safetensors: tests/fuzz/fuzz_safetensors.c core/checkpoint.c core/error.c core/fileio.c core/checkpoint.h $(FLAGS_STAMP)
	@bash scripts/install-deps.sh fuzz
	clang -g -O1 -std=c11 -D_GNU_SOURCE -DFL_ST_NO_TENSOR -fsanitize=fuzzer,address,undefined -Icore -o $@ \
	  tests/fuzz/fuzz_safetensors.c core/checkpoint.c core/error.c core/fileio.c -lcjson

# ---- the flags stamp (FLAGS_STAMP, at the top): here, after the probes and every LDLIBS += above ----
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS)))
FLAGS_NOW := CC=$(CC) | CFLAGS=$(CFLAGS) | LUA_CFLAGS=$(LUA_CFLAGS) | LDFLAGS=$(LDFLAGS) | LDLIBS=$(LUA_LIBS) $(LDLIBS) \
  | NVCC=$(NVCC) | NVCCFLAGS=$(NVCCFLAGS) | FUZZ_CFLAGS=$(FUZZ_CFLAGS)
# goals that build nothing leave the stamp alone (`make help CUDA=1` must not rebuild the next `make`)
NOBUILD_GOALS := clean help cflags probes deps uninstall
ifneq ($(if $(MAKECMDGOALS),$(filter-out $(NOBUILD_GOALS),$(MAKECMDGOALS)),all),)
  ifneq ($(file <$(FLAGS_STAMP)),$(FLAGS_NOW))
    ifneq (,$(DRY_RUN))
      # -n / -q write nothing, but show (or report) everything the new flags rebuild
      .PHONY: $(FLAGS_STAMP)
    else
      $(file >$(FLAGS_STAMP).tmp,$(FLAGS_NOW))
      $(file >$(BUILD)/make.args.tmp,$(filter-out BUILD=% PREFIX=% DESTDIR=%,$(MAKEOVERRIDES)))
      $(shell mv -f $(BUILD)/make.args.tmp $(BUILD)/make.args && mv -f $(FLAGS_STAMP).tmp $(FLAGS_STAMP))
    endif
  endif
endif
ifeq (,$(DRY_RUN))
# written above; this rule only recreates it after a `make clean` in the same run
$(FLAGS_STAMP):
	@mkdir -p $(@D)
	$(file >$@,$(FLAGS_NOW))
endif
