#!/usr/bin/env bash
# Packs MLX-CUDA (mlx==0.32.4 for CPython 3.12 + mlx-cuda-13==0.32.4, manylinux_2_35 x86_64) so
# it can travel to the GPU machine, whose calls carry at most 64 MiB (shared/bench/PEERS.md,
# "Installing the peers"): both wheels unpacked into one folder (about 190 MB), packed as one
# tar.xz (about 75 MB), split into two parts under .mlx/ (ignored by git):
#
#   .mlx/1/mlx_cuda.tar.xz.part1     56 MiB, carried by the first call
#   .mlx/2/mlx_cuda.tar.xz.part2     the rest, carried by the second call
#   .mlx/2/mlx_cuda.sha256           checksum of the joined tar.xz
#
# Part 1 is the larger one so the second call has room for other carried paths (a kiln wheel).
# Run here (needs the network), in the repository root:  bash scripts/mlx_cuda_pack.sh
# Then see scripts/mlx_cuda_unpack.sh for the two calls on the device.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.32.4
PART1_MIB=56
OUTDIR="$ROOT/.mlx"
PY=${PYTHON:-python3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "[mlx_cuda_pack] downloading mlx==$VERSION (cp312) and mlx-cuda-13==$VERSION"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 -d "$work/wheels" "mlx==$VERSION" "mlx-cuda-13==$VERSION"

# Both wheels into one folder: mlx brings the Python package and its extension module, and
# mlx-cuda-13 adds mlx/lib/libmlx.so (CUDA build), the headers its JIT compiles against, and
# the LAPACK/BLAS it links (mlx_cuda_13.libs).
mkdir -p "$work/site"
for whl in "$work"/wheels/*.whl; do
    "$PY" -m zipfile -e "$whl" "$work/site"
done
test -f "$work/site/mlx/lib/libmlx.so" || { echo "[mlx_cuda_pack] libmlx.so missing" >&2; exit 1; }
ls "$work"/site/mlx/core.cpython-312-*.so >/dev/null

echo "[mlx_cuda_pack] packing $(du -sh "$work/site" | cut -f1) as tar.xz (a few minutes on 2 cores)"
tar -C "$work/site" -cf - . | nice xz -9 -T2 -c > "$work/mlx_cuda.tar.xz"

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/1" "$OUTDIR/2"
size=$(stat -c %s "$work/mlx_cuda.tar.xz")
part1=$((PART1_MIB * 1024 * 1024))
if [ "$size" -le "$part1" ] || [ "$size" -ge $((2 * part1)) ]; then
    echo "[mlx_cuda_pack] unexpected archive size $size: the split into two parts assumes 56..112 MiB" >&2
    exit 1
fi
head -c "$part1" "$work/mlx_cuda.tar.xz" > "$OUTDIR/1/mlx_cuda.tar.xz.part1"
tail -c +"$((part1 + 1))" "$work/mlx_cuda.tar.xz" > "$OUTDIR/2/mlx_cuda.tar.xz.part2"
(cd "$work" && sha256sum mlx_cuda.tar.xz) > "$OUTDIR/2/mlx_cuda.sha256"

# Checks: the parts join back into the archive, and each stays under 60 MiB.
cat "$OUTDIR/1/mlx_cuda.tar.xz.part1" "$OUTDIR/2/mlx_cuda.tar.xz.part2" | cmp - "$work/mlx_cuda.tar.xz"
for f in "$OUTDIR"/1/*.part1 "$OUTDIR"/2/*.part2; do
    s=$(stat -c %s "$f")
    [ "$s" -lt $((60 * 1024 * 1024)) ] || { echo "[mlx_cuda_pack] $f is $s bytes, over 60 MiB" >&2; exit 1; }
    printf '[mlx_cuda_pack] %-40s %6.1f MiB\n' "${f#"$ROOT"/}" "$(echo "$s / 1048576" | bc -l)"
done
echo "[mlx_cuda_pack] done; on the device: see the top of scripts/mlx_cuda_unpack.sh"
