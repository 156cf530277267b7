#!/usr/bin/env bash
# Build llama-server from the llama.cpp that the installed llama-cpp-python vendors (same
# version as the Python bindings), CPU only, once per version: the binary is cached under
# ${XDG_CACHE_HOME:-~/.cache}/tplparse/llama-server-<version>/. Prints the binary's path.
#   .ci/llama-server.sh PYTHON   (the venv's python, which has llama-cpp-python installed)
set -euo pipefail
python=${1:?usage: .ci/llama-server.sh PYTHON}
version=$("$python" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tplparse/llama-server-$version"
if [ -x "$cache/llama-server" ] && "$cache/llama-server" --version >/dev/null 2>&1; then
    echo "$cache/llama-server"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The sdist (pip's cache keeps its download) carries llama.cpp's whole source in vendor/.
"$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
tar xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
# No network at build time: no prebuilt web UI download, no TLS, no curl.
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$cache.tmp"
cp "$work/build/bin/llama-server" "$cache.tmp/"
rm -rf "$cache" && mv "$cache.tmp" "$cache"
echo "$cache/llama-server"
