#!/usr/bin/env bash
# Builds llref (llref.cpp) against llama.cpp and ggml as ollama vendors them in its Go
# module: the Go module proxy is the one place llama.cpp's sources are reachable from
# here (go module zips leave out llama.cpp's vendor/ headers, so ollama's own cgo
# package does not build; libllama and ggml need none of them). Usage:
#   models/lm/gguf/ggmlcheck/llamacpp/build.sh [OUT_DIR]     (default /tmp/llref)
# then OUT_DIR/llref ... (see llref.cpp). Takes 20-40 CPU-minutes; nothing in the
# test suite needs it.
set -euo pipefail
ver=v0.17.4
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/llref}
mkdir -p "$out/obj"
src=$(cd "$out" && GOFLAGS= go mod download -json "github.com/ollama/ollama@$ver" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
g=$src/ml/backend/ggml/ggml/src
l=$src/llama/llama.cpp
flags="-O3 -march=native -DNDEBUG -D_GNU_SOURCE -DGGML_USE_CPU -DGGML_USE_LLAMAFILE"
flags+=" -DGGML_VERSION='\"ollama-$ver\"' -DGGML_COMMIT='\"vendored\"'"
flags+=" -I$src/ml/backend/ggml/ggml/include -I$g -I$g/ggml-cpu -I$l/include -I$l/src"
srcs=$(ls "$g"/*.c "$g"/*.cpp "$g"/ggml-cpu/*.c "$g"/ggml-cpu/*.cpp "$g"/ggml-cpu/amx/*.cpp \
	"$g"/ggml-cpu/llamafile/sgemm.cpp "$g"/ggml-cpu/arch/x86/*.c "$g"/ggml-cpu/arch/x86/*.cpp \
	"$l"/src/*.cpp "$l"/src/models/*.cpp "$here/llref.cpp" | grep -v '/mem_')
{
	echo "FLAGS=$flags"
	objs=""
	i=0
	for s in $srcs; do
		i=$((i + 1))
		o=obj/$i.o
		objs+=" $o"
		case $s in
		*.c) printf '%s: %s\n\tgcc -std=c11 $(FLAGS) -c $< -o $@\n' "$o" "$s" ;;
		*) printf '%s: %s\n\tg++ -std=c++17 $(FLAGS) -c $< -o $@\n' "$o" "$s" ;;
		esac
	done
	printf 'llref:%s\n\tg++ -o $@ $^ -lpthread -lm\n' "$objs"
} >"$out/Makefile"
[ -n "${LLREF_DRYRUN:-}" ] && exit 0
make -C "$out" -j"$(nproc)" llref
echo "built $out/llref"
