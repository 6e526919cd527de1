#!/usr/bin/env bash
# A CUDA 12 toolkit for building the PyPI wheel's CUDA 12 module on a machine that has only CUDA 13
# (`python -m build_matrix release --dry-run`; the release's builder images bring NVIDIA's own CUDA 12.8).
#
# PyPI cannot provide one: every nvidia-cuda-nvcc-cu12 wheel (12.0 to 12.9.86) carries only ptxas, libnvvm,
# libdevice and the crt headers, no nvcc, cicc, cudafe++, fatbinary or nvlink; only CUDA 13 comes from
# PyPI whole (build_matrix build --toolkit pypi). Debian packages NVIDIA's CUDA 12.4.1 (non-free, trixie):
# this script downloads those packages with apt-get (a private source list and cache under the target;
# nothing is installed on the system), unpacks them with dpkg-deb and lays them out as a conventional
# toolkit root (bin/, nvvm/, include/, lib64/, an nvcc.profile relative to itself), which `build_matrix
# build` finds under $MAMBA_DEV_HOME/toolkits/ and uses for a CUDA 12 cell when the archs asked for are
# ones nvcc 12.4 supports (up to sm_90: no sm_100 / sm_120, which need 12.8).
#
# Usage: bash ci/cuda12_from_debian.sh   (about 1 GB download; idempotent; CUDA12_DEBS=DIR: the
# packages already downloaded there)
set -euo pipefail
DEV_HOME="${MAMBA_DEV_HOME:-$HOME/.cache/mamba-ssm-dev}"
VERSION=12.4
CUDA_DEB=12.4.127~12.4.1-2
NVCC_DEB=12.4.131~12.4.1-2
TARGET="$DEV_HOME/toolkits/cuda-$VERSION-debian"
if [ -x "$TARGET/bin/nvcc" ]; then
  "$TARGET/bin/nvcc" --version | tail -2
  exit 0
fi
WORK="$TARGET.partial"
rm -rf "$WORK"
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/debs" "$WORK/root"
echo "deb http://deb.debian.org/debian trixie main non-free" > "$WORK/apt/sources.list"
APT=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache" -o Dir::State::Status=/var/lib/dpkg/status)
if [ -n "${CUDA12_DEBS:-}" ]; then  # a folder holding these packages already downloaded
  cp "$CUDA12_DEBS"/*.deb "$WORK/debs/"
else
  apt-get "${APT[@]}" update -q
  (cd "$WORK/debs" && apt-get "${APT[@]}" download \
    "nvidia-cuda-toolkit=$NVCC_DEB" "libnvvm4=$NVCC_DEB" "nvidia-cuda-dev=$CUDA_DEB" "libcudart12=$CUDA_DEB" \
    libthrust-dev libcub-dev libcu++-dev)
fi
for deb in "$WORK"/debs/*.deb; do dpkg-deb -x "$deb" "$WORK/root"; done
R="$WORK/root"
T="$WORK/cuda"
mkdir -p "$T/bin" "$T/nvvm/bin" "$T/nvvm/lib64" "$T/lib64" "$T/include"
for tool in ptxas fatbinary nvlink cudafe++ bin2c cuobjdump nvdisasm nvprune cu++filt; do
  cp -a "$R/usr/bin/$tool" "$T/bin/"
done
cp -a "$R/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$R/usr/lib/nvidia-cuda-toolkit/bin/crt" "$T/bin/"
cp -a "$R/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$T/nvvm/bin/"
cp -a "$R/usr/lib/nvidia-cuda-toolkit/libdevice" "$T/nvvm/"
cp -a "$R"/usr/lib/x86_64-linux-gnu/libnvvm.so* "$T/nvvm/lib64/"
cp -a "$R"/usr/include/. "$T/include/"
cp -a "$R"/usr/lib/x86_64-linux-gnu/libcudart* "$R"/usr/lib/x86_64-linux-gnu/libcudadevrt.a \
  "$R"/usr/lib/x86_64-linux-gnu/libculibos.a "$T/lib64/"
# nvcc reads bin/nvcc.profile; this one is relative to the root (Debian's points into /usr)
cat > "$T/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:$(TOP)/nvvm/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
ln -s lib64 "$T/lib"
"$T/bin/nvcc" --version | tail -2
rm -rf "$TARGET"
mv "$T" "$TARGET"
rm -rf "$WORK"
echo "CUDA $VERSION toolkit (Debian's packages of NVIDIA's CUDA) at $TARGET"
