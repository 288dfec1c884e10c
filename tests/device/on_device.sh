#!/bin/bash
# The GPU check on a lent device machine, from the source tree (nothing of the project is built there):
#     bash tests/device/on_device.sh [check.py's options]      carry: build/device (made by `nox -s gpu_pack`)
# The image's python3 has torch but not every package the check imports: pack.py's wheels are installed beside it
# into a scratch folder. The check's folder is packed into one archive after every step, in $OUT when the device
# tool sets it (what a call brings back), else in build/: build/gpu.tar.gz. DEVICE (cuda), PY (python3), PACK
# (build/device) and GPU_OUT (build/gpu, the check's folder) can be set for a dry run elsewhere.
set -u
cd "$(dirname "$0")/../.."
PACK=${PACK:-build/device}
PY=${PY:-python3}
if ! compgen -G "$PACK/wheels/*.whl" >/dev/null; then
  echo "on_device.sh: no wheels in $PACK/wheels; run 'nox -s gpu_pack' here first and carry $PACK" >&2
  exit 2
fi
SITE=$(mktemp -d)
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$PACK"/wheels/*.whl || exit 2
export PYTHONPATH=$PWD/src:$SITE PYTHONUNBUFFERED=1
ORIGINAL=()
[[ -d $PACK/original/src/esper ]] && ORIGINAL=(--original "$PACK/original/src")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
exec $PY tests/device/check.py --device "${DEVICE:-cuda}" "${ORIGINAL[@]}" --out "${GPU_OUT:-build/gpu}" \
  --archive "${OUT:-build}/gpu.tar.gz" "$@"
