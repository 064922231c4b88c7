#!/usr/bin/env bash
# The Vulkan lane (docs/gpu.md, "The Vulkan lane"): on Debian 12 x86_64, build the pinned ggml
# with ggml-vulkan and qtts against it, then run the parity phases of scripts/check_gpu.py and the
# device tests on Mesa's software Vulkan driver (lavapipe), so the portable graphs run on a second
# GPU API without a GPU.
#
#   bash scripts/check_vulkan.sh [OUT]      # OUT: where check_gpu.json/.md and logs go
#
# Needs root for apt-get (skipped when the packages are there) and the interpreter it is run with
# holding the test extra and the reference (`pip install ".[test]" && pip install --no-deps
# qwen-tts==0.1.1`). Everything built is kept under QTTS_VULKAN_CACHE (default
# ~/.cache/qtts-vulkan): a venv seeing this interpreter's packages with the Vulkan ggml and qtts
# of its own, ggml's build (about 4 minutes on 2 cores, done once) and Mesa's shader cache (a
# cold one costs minutes of shader compilation on the first runs).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="$(realpath -m "${1:-vulkan-check}")"
cache="${QTTS_VULKAN_CACHE:-$HOME/.cache/qtts-vulkan}"
ggml="libggml-python==0.20.2.post1"
python="${PYTHON:-python3}"
mkdir -p "$out" "$cache"
log="$out/build.log"
: >"$log"
step() { echo "check_vulkan: $*" | tee -a "$log"; }

# --- packages: the Vulkan loader, headers and shader compiler; Mesa 25 from bookworm-backports
# (Debian 12's own lavapipe, Mesa 22.3, crashes in its queue thread in about half the runs)
if ! dpkg -s libvulkan-dev glslc mesa-vulkan-drivers >/dev/null 2>&1 ||
    ! dpkg -s mesa-vulkan-drivers | grep -q '^Version: 2[5-9]'; then
    step "installing the Vulkan packages"
    export DEBIAN_FRONTEND=noninteractive
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
        cat >/etc/apt/sources.list.d/bookworm-backports.sources <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    fi
    apt-get update -q >>"$log" 2>&1
    apt-get install -y -q libvulkan-dev glslc glslang-tools spirv-headers vulkan-tools >>"$log" 2>&1
    apt-get install -y -q -t bookworm-backports mesa-vulkan-drivers >>"$log" 2>&1
fi

# --- a venv that sees the calling interpreter's packages (torch, the reference, the test
# extra) behind its own ggml and qtts: its site-packages comes first on sys.path
venv="$cache/venv"
if [ ! -x "$venv/bin/python" ]; then
    step "creating $venv"
    "$python" -m venv "$venv"
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$python" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' >"$site/qtts-base.pth"
pip=("$venv/bin/python" -m pip install -q --ignore-installed --no-deps)
"${pip[@]}" "scikit-build-core~=1.0.0" "setuptools-scm~=10.2" vcs-versioning pybind11 >>"$log" 2>&1

# --- ggml with Vulkan, built once from the pinned sdist
if ! ls "$site"/libggml/lib/libggml-vulkan.so* >/dev/null 2>&1; then
    step "building $ggml with GGML_VULKAN=ON (about 4 minutes on 2 cores)"
    src="$cache/src"
    rm -rf "$src" && mkdir -p "$src"
    "$venv/bin/python" -m pip download -q --no-deps --no-binary :all: -d "$src" "$ggml" >>"$log" 2>&1
    tar -xzf "$src"/libggml_python-*.tar.gz -C "$src"
    sdist="$(echo "$src"/libggml_python-*/)"
    # Debian 12's Vulkan headers are 1.3.239; ggml-vulkan.cpp asks for validation-layer settings
    # through VK_EXT_layer_settings (headers >= 1.3.272). Build the instance without them on
    # older headers (they only matter with the validation layer installed).
    vk="$sdist/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    grep -q 'vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);' "$vk"
    sed -i \
        -e 's|^\(\s*\)std::vector<vk::LayerSettingEXT> settings = {|#if VK_HEADER_VERSION >= 272\n&|' \
        -e 's|^\(\s*\)vk::InstanceCreateInfo instance_create_info(\(.*\), &layer_setting_info);|&\n#else\n\1vk::InstanceCreateInfo instance_create_info(\2);\n#endif|' \
        "$vk"
    grep -q '^#if VK_HEADER_VERSION >= 272' "$vk"
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" --no-build-isolation "$sdist" \
        -C cmake.define.GGML_VULKAN=ON -C build-dir="$cache/ggml-build" >>"$log" 2>&1
fi

# --- qtts against it (incremental: its build folder is kept)
step "building qtts against the Vulkan ggml"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" --no-build-isolation "$repo" -C build-dir="$cache/qtts-build" \
    >>"$log" 2>&1

# --- the checks on lavapipe
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"  # ggml-vulkan hides CPU-type devices otherwise
export MESA_SHADER_CACHE_DIR="$cache/mesa-shader-cache"
export MESA_SHADER_CACHE_MAX_SIZE="${MESA_SHADER_CACHE_MAX_SIZE:-4G}"

step "Mesa $(dpkg-query -W -f '${Version}' mesa-vulkan-drivers), built in ${SECONDS} s"
"$venv/bin/python" -c 'import qtts; from qtts._native import core; print(qtts.__file__, core.devices())' | tee -a "$log"
step "the parity phases on Vulkan0 (check_gpu.json and check_gpu.md in $out)"
rc=0
"$venv/bin/python" scripts/check_gpu.py run --device Vulkan0 --no-build --ops portable --out "$out" \
    --work "$cache/work" --budget-s "${QTTS_VULKAN_BUDGET_S:-10800}" \
    --phases info,goldens,parity_exact,parity_fast,batch_parity_exact,ops || rc=1
step "the device tests on Vulkan0"
QTTS_TEST_DEVICE=Vulkan0 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/csrc/runtime/test_device_path.py \
    tests/qtts/runtime/scheduling/test_batch.py tests/csrc/nets || rc=1
step "done in ${SECONDS} s (exit $rc)"
exit "$rc"
