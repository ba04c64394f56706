# Sourced by the device scripts, from the repository root on the GPU machine: installs the
# build carried in .carry (or .carryx, xz-compressed: leaves room for an MLX part in the
# call) into python/kiln and its wheels (mlx-lm) into /tmp/site, puts both on PYTHONPATH,
# sets OUT (default /tmp) and prints the GPU.
if [ -f .carryx/_core.abi3.so.xz ]; then
    xz -dc .carryx/_core.abi3.so.xz > python/kiln/_core.abi3.so; WHEELS=.carryx/whl
else
    cp .carry/_core.abi3.so python/kiln/_core.abi3.so; WHEELS=.carry/whl
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $WHEELS/*.whl 2>/dev/null
export PYTHONPATH="$PWD/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
