#!/usr/bin/env bash
# Capture what a real GPU machine shows, as test fixtures (run on a machine with NVIDIA GPUs).
#
#   tools/capture_gpu_fixtures.sh OUT_DIR
#
# Writes nvidia-smi's outputs (the exact `--query-gpu` the worker charm runs, `-q -x`,
# `--version`, the table), the NVIDIA PCI functions' sysfs attributes, the kernel and
# driver versions, and what the charm's own detection code makes of them. Nothing here
# changes the machine. Commands that are missing or fail leave their exit status in
# `<name>.rc` next to their output, so a fixture also records how a command fails.
set -uo pipefail
out=${1:?usage: capture_gpu_fixtures.sh OUT_DIR}
mkdir -p "$out/sysfs"
here=$(cd "$(dirname "$0")/.." && pwd)

capture() {  # capture NAME COMMAND...: stdout+stderr to NAME, exit status to NAME.rc
    local name=$1
    shift
    "$@" >"$out/$name" 2>&1
    echo $? >"$out/$name.rc"
}

fields=$(PYTHONPATH="$here/charms/kubernetes-worker/src" python3 -c \
    'import gpu; print(",".join(gpu.SMI_FIELDS))' 2>/dev/null ||
    echo index,name,memory.total,memory.used,utilization.gpu,temperature.gpu,mig.mode.current,driver_version,pci.bus_id)

capture uname.txt uname -r
capture os-release.txt cat /etc/os-release
capture nvidia-smi-query-gpu.csv nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits
capture nvidia-smi-version.txt nvidia-smi --version
capture nvidia-smi.txt nvidia-smi
capture nvidia-smi-q.xml nvidia-smi -q -x
capture nvidia-smi-L.txt nvidia-smi -L
capture nvidia-smi-topo.txt nvidia-smi topo -m
capture nvidia-smi-mig-lgip.txt nvidia-smi mig -lgip
capture nvidia-smi-fabric.csv nvidia-smi --query-gpu=index,fabric.state,fabric.status --format=csv
capture proc-driver-version.txt cat /proc/driver/nvidia/version
capture sys-module-nvidia-version.txt cat /sys/module/nvidia/version
capture dev-nvidia.txt sh -c 'ls -1 /dev/nvidia* /dev/nvidia-caps 2>&1'
capture lspci-nn.txt lspci -nn
capture dpkg-nvidia.txt sh -c "dpkg-query -W -f='\${Package} \${Version} \${Status}\n' '*nvidia*' 'linux-image-*' 'linux-modules-*'"
capture nvidia-ctk-version.txt nvidia-ctk --version
capture ubuntu-drivers-gpgpu.txt ubuntu-drivers list --gpgpu

# Every PCI function's ids (to see which classes sit next to the GPUs: NVSwitch 0x0680,
# audio 0x0403), and the full attribute set of the NVIDIA functions.
{
    for f in /sys/bus/pci/devices/*; do
        printf '%s %s %s %s %s %s %s\n' "$(basename "$f")" "$(cat "$f/vendor")" \
            "$(cat "$f/device")" "$(cat "$f/class")" "$(cat "$f/subsystem_vendor" 2>/dev/null)" \
            "$(cat "$f/subsystem_device" 2>/dev/null)" \
            "$(basename "$(readlink "$f/driver" 2>/dev/null)" 2>/dev/null)"
    done
} >"$out/pci-functions.txt" 2>&1
for f in /sys/bus/pci/devices/*; do
    [ "$(cat "$f/vendor")" = 0x10de ] || continue
    d="$out/sysfs/$(basename "$f")"
    mkdir -p "$d"
    for attr in vendor device class subsystem_vendor subsystem_device revision numa_node \
        current_link_speed current_link_width max_link_speed max_link_width; do
        cat "$f/$attr" >"$d/$attr" 2>/dev/null || true
    done
    basename "$(readlink "$f/driver" 2>/dev/null)" >"$d/driver" 2>/dev/null || true
    readlink -f "$f" >"$d/realpath" 2>/dev/null || true
done

# What the worker charm's own code makes of this machine.
capture charm-detect.txt env PYTHONPATH="$here/charms/kubernetes-worker/src" python3 - <<'EOF'
import gpu, subprocess, pathlib
inv = gpu.detect(pathlib.Path("/sys"))
print("inventory:", inv)
q = subprocess.run(["nvidia-smi", *gpu.SMI_QUERY_ARGS], capture_output=True, text=True)
v = subprocess.run(["nvidia-smi", "--version"], capture_output=True, text=True)
report = gpu.smi_report((q.returncode, q.stdout + q.stderr), (v.returncode, v.stdout))
print("report:", report)
merged = gpu.with_smi(inv, report)
print("status:", gpu.status_message(merged, report))
print("records:", gpu.inventory_records(merged, report))
print("gpu-info:", gpu.gpu_info(report))
EOF
