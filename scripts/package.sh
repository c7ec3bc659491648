#!/usr/bin/env bash
# Build ibvcap's Debian package: dist/ibvcap_VERSION_ARCH.deb (and the
# .buildinfo and .changes beside it), with Debian's own tools
# (dpkg-buildpackage -b -us -uc over debian/), then lintian on it.
#   bash scripts/package.sh        # as root it installs missing build-deps
# Install it with: apt install ./dist/ibvcap_*.deb   (docs/operations.md,
# "Install on an acquisition host").
#
# The build happens in build-deb/ (a copy of the working tree's files: git's
# tracked and untracked-but-not-ignored ones), so dpkg-buildpackage's outputs
# in the parent directory stay inside the repository. With ccache installed
# the compiler goes through it (IBVCAP_PACKAGE_CCACHE=0: not), so a rebuild
# of unchanged sources costs seconds. DIST_DIR=DIR puts the result elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dist=${DIST_DIR:-$root/dist}
version=$(sed -nE '1s/^ibvcap \(([^)]+)\).*/\1/p' debian/changelog)
[ -n "$version" ] || { echo "package.sh: no version on the first line of debian/changelog" >&2; exit 1; }
work=$root/build-deb
src=$work/ibvcap-$version

command -v git >/dev/null || { echo "package.sh: git is needed to list the source files (apt install git)" >&2; exit 1; }
for tool in dpkg-buildpackage dh; do
  if ! command -v "$tool" >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "package.sh: $tool is missing: run as root to install dpkg-dev and debhelper, or apt install dpkg-dev debhelper" >&2
      exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dpkg-dev debhelper build-essential
  fi
done

echo "== package.sh: copying the source tree to $src"
rm -rf "$work"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$src"

if ! (cd "$src" && dpkg-checkbuilddeps >/dev/null 2>&1); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "package.sh: $(cd "$src" && dpkg-checkbuilddeps 2>&1 | tail -n 1); run as root to install them, or apt-get build-dep ./" >&2
    exit 1
  fi
  echo "== package.sh: installing the build dependencies"
  DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q "$src"
fi

extra=""
if [ "${IBVCAP_PACKAGE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  extra="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  # debhelper (compat 13) gives the build a HOME of its own: name the cache.
  CCACHE_DIR=${CCACHE_DIR:-$(ccache -k cache_dir)}
  export CCACHE_DIR CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=1
fi
echo "== package.sh: dpkg-buildpackage -b -us -uc"
t0=$SECONDS
(cd "$src" && IBVCAP_CMAKE_EXTRA="$extra" DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-} parallel=$(nproc)" \
  dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  echo "package.sh: dpkg-buildpackage failed; the whole log is $work/build.log" >&2
  exit 1
}
mkdir -p "$dist"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb=$dist/ibvcap_${version}_$arch.deb
cp "$work/ibvcap_${version}_$arch.deb" "$work"/ibvcap_"${version}"_"$arch".{buildinfo,changes} "$dist/"
echo "== package.sh: built $deb in $((SECONDS - t0)) s"

if command -v lintian >/dev/null; then
  # Errors fail the build; the warnings left are documented in
  # docs/operations.md ("The package").
  lintian --fail-on error "$deb"
  echo "== package.sh: lintian found no errors"
else
  echo "== package.sh: lintian is not installed: not run (apt install lintian)" >&2
fi
echo "$deb"
