#!/usr/bin/env bash
# Installs MLX-CUDA on the GPU machine from the two parts made by scripts/mlx_cuda_pack.sh
# (a call carries at most 64 MiB; the packed MLX-CUDA is about 75 MB). Two calls, the second
# within the 30 s the machine stays warm after the first (/root survives only while warm):
#
#   call 1: carry [".mlx/1"]                command: bash scripts/mlx_cuda_unpack.sh
#           -> moves part 1 out of the tree to /root/mlxparts (it ends in seconds)
#   call 2: carry [".mlx/2", ...others]     command: bash scripts/mlx_cuda_unpack.sh; \
#               . /root/mlx_site/env.sh; python3 bench/gpu.py ...
#           -> joins the parts, checks the sha256, unpacks into /root/mlx_site, links the
#              image's CUDA libraries where libmlx.so looks for them, runs an op and a compiled
#              function, and writes /root/mlx_site/env.sh (PYTHONPATH, and CUDA_HOME if MLX's JIT
#              needed the toolkit's headers). `;` rather than `&&`: if MLX fails, env.sh is
#              absent and bench/gpu.py runs the other systems, noting mlx as not installed.
#
# Run again on a machine where /root/mlx_site is unpacked, it only checks the import again.
# If call 2 finds no part 1, the machine went back between the calls: start again at call 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PARTS=${MLX_PARTS_DIR:-/root/mlxparts}  # overridable for a dry run off the device
SITE=${MLX_SITE_DIR:-/root/mlx_site}
P1="$ROOT/.mlx/1/mlx_cuda.tar.xz.part1"
P2="$ROOT/.mlx/2/mlx_cuda.tar.xz.part2"
SUM="$ROOT/.mlx/2/mlx_cuda.sha256"

check() {
    # An op and a compiled function on the default device (the latter needs the CUDA headers
    # MLX's JIT compiles against, found next to libmlx.so or under CUDA_HOME).
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import mlx.core as mx
x = mx.arange(4, dtype=mx.float32) * 2
f = mx.compile(lambda a: a * mx.sigmoid(a) + 1)
mx.eval(x, f(x))
print("[mlx_cuda_unpack] mlx", mx.__version__, "default device", mx.default_device(),
      "gpu available", mx.is_available(mx.gpu), "sum", x.sum().item())
'
}

# On success writes $SITE/env.sh, the exports that make `import mlx.core` work.
check_or_hint() {
    local cuda_home=""
    if ! check; then
        if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda/include ] && CUDA_HOME=/usr/local/cuda check; then
            cuda_home=/usr/local/cuda
        else
            echo "[mlx_cuda_unpack] $SITE is unpacked but mlx.core fails (above); a missing CUDA" \
                 "library can be added with LD_LIBRARY_PATH, then run this script again" >&2
            exit 1
        fi
    fi
    {
        echo "export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
        [ -n "$cuda_home" ] && echo "export CUDA_HOME=$cuda_home"
        true
    } > "$SITE/env.sh"
    touch "$SITE/.complete"
    echo "[mlx_cuda_unpack] done; in this call: . $SITE/env.sh  ($(tr '\n' ';' < "$SITE/env.sh"))"
}

if [ -f "$SITE/.complete" ] || [ -f "$SITE/.unpacked" ]; then
    echo "[mlx_cuda_unpack] $SITE is already unpacked"
    check_or_hint
    exit 0
fi

if [ -f "$P1" ]; then
    mkdir -p "$PARTS"
    mv "$P1" "$PARTS/"
    echo "[mlx_cuda_unpack] part 1 stored in $PARTS ($(du -h "$PARTS/mlx_cuda.tar.xz.part1" | cut -f1))"
fi

if [ ! -f "$P2" ]; then
    if [ -f "$PARTS/mlx_cuda.tar.xz.part1" ]; then
        echo "[mlx_cuda_unpack] now, within 30 s, the second call carrying .mlx/2"
        exit 0
    fi
    echo "[mlx_cuda_unpack] no parts here: carry .mlx/1 (call 1), then .mlx/2 (call 2)" >&2
    exit 1
fi
if [ ! -f "$PARTS/mlx_cuda.tar.xz.part1" ]; then
    echo "[mlx_cuda_unpack] part 2 is here but part 1 is not in $PARTS: the machine was given" \
         "back after call 1; start again with call 1 (carry .mlx/1)" >&2
    exit 1
fi

cat "$PARTS/mlx_cuda.tar.xz.part1" "$P2" > "$PARTS/mlx_cuda.tar.xz"
if [ -f "$SUM" ]; then
    (cd "$PARTS" && sha256sum -c --quiet "$SUM")
fi
rm -rf "$SITE"
mkdir -p "$SITE"
tar -C "$SITE" -xJf "$PARTS/mlx_cuda.tar.xz"
rm -rf "$PARTS"

# libmlx.so's RPATH is $ORIGIN/../../nvidia/<lib>/lib, i.e. $SITE/nvidia/...: link each
# folder of the image's `nvidia` namespace package (cublas, cuda_nvrtc, cudnn, nccl, cu13, ...)
# there, so the CUDA libraries the image already has are the ones MLX loads.
mkdir -p "$SITE/nvidia"
python3 - "$SITE/nvidia" <<'EOF'
import importlib.util, os, sys
dest = sys.argv[1]
spec = importlib.util.find_spec("nvidia")
if spec is None or not spec.submodule_search_locations:
    sys.exit("[mlx_cuda_unpack] no `nvidia` package in this python: MLX cannot find cuBLAS etc.")
for folder in spec.submodule_search_locations:
    if os.path.realpath(folder) == os.path.realpath(dest):
        continue
    for name in os.listdir(folder):
        link = os.path.join(dest, name)
        if not os.path.lexists(link) and os.path.isdir(os.path.join(folder, name)):
            os.symlink(os.path.join(folder, name), link)
print("[mlx_cuda_unpack] linked", sorted(os.listdir(dest)))
EOF

touch "$SITE/.unpacked"
check_or_hint
