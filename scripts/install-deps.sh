#!/usr/bin/env bash
# Install the Debian packages ibvcap builds, tests and demos with. Idempotent:
# when everything is already installed it changes nothing and needs no network.
# CUDA is not installed here: the build detects a toolkit that is present
# (IBVCAP_CUDA=AUTO) and builds the "built without CUDA" stub otherwise.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libibverbs-dev ibverbs-utils rdma-core
  libpcap-dev libcxxopts-dev libfmt-dev nlohmann-json3-dev libreaderwriterqueue-dev
  libcap-dev  # ibvcap doctor: file and process capabilities (libcap)
  libxxhash-dev xxhash  # the outputs' sidecar index checksum (XXH3-64); xxhsum checks it in tests
  libgtest-dev libgmock-dev libbenchmark-dev
  clang clang-format
  tshark tcpdump iproute2 jq ethtool
  wireshark-common  # capinfos (tshark depends on it): test_pcapng opens ibvcap's pcapng with it
  systemtap-sdt-dev bpftrace
  prometheus # promtool: test/e2e/metrics.sh checks the --metrics-file
  # test/browser/run_page.sh: the run page loaded in headless Chromium, driven
  # over the DevTools protocol from Python
  chromium python3 python3-minimal python3-websocket  # python3-minimal: /usr/bin/python3, whose packages python3-websocket extends
  time  # GNU time: bench/run.sh's peak RSS of the file-scaling runs
  # test/e2e/package.sh: the package built (scripts/package.sh), checked and
  # installed: systemd-analyze verify, lintian, getcap; a fresh Debian has
  # none of them (seen with ../shared/tools/fresh-debian.sh)
  dpkg-dev debhelper fakeroot lintian systemd libcap2-bin
  help2man  # debian/control Build-Depends: the man pages (IBVCAP_MANPAGES=ON in debian/rules)
  e2fsprogs util-linux mount  # test/e2e/stall.sh: mkfs.ext4, losetup and lsblk, mount (a throttled loop disk)
  binutils  # strip: scripts/gpu-check.sh --bundle (build-essential brings it; named for e2e_deps)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark's wireshark-common asks whether non-superusers may capture packets:
# answer it up front ("no", dumpcap stays root-only), so the install never prompts.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
