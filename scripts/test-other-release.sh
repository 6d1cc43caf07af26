#!/usr/bin/env bash
# Runs the whole suite (./scripts/test.sh) on the other Debian release, in a debootstrap chroot.
#
# What: a project machine runs Debian 12 (bookworm) or Debian 13 (trixie); the build and every test must work
#   on both. This script picks the release this machine does not run (from /etc/debian_version), or the one
#   named by the first argument (12, 13, bookworm, trixie), and runs the suite there:
#     1. creates a minimal chroot of that release with debootstrap (once; it is cached, see below);
#     2. copies the working tree into it: the tracked files plus the untracked ones git does not ignore (never
#        build folders, so the host's build/, build-asan/, ... are not touched and cannot leak in);
#     3. bind-mounts ../shared read-only beside the copy (the fixture tests find it as ../shared), and /proc,
#        /sys, /dev, /dev/pts; everything is unmounted on exit, whatever happens;
#     4. runs ./scripts/test.sh there, as root, with a clean environment: CI unset, ETNP_TEST_QUICK and
#        ETNP_JOBS passed through when set. The live exports need a venv with torch wheels the chroot lacks, so
#        they are made on this machine (its dev venv and export cache, as test.sh does) and the chroot runs
#        etnp's side on them: the cache is bind-mounted read-only at the same path and ETNP_LIVE_RECORDS lists
#        the export folders. Where this machine cannot make its venv either, ETNP_SKIP_LIVE=1 instead.
#        test.sh calls scripts/install-deps.sh --test, so the chroot's packages come from the project's own
#        list and a package missing from it fails here as on a fresh machine.
#   It prints the result lines of every step and a summary, and exits non-zero where the suite fails.
#
# How:
#   sudo ./scripts/test-other-release.sh                 # the other release than this machine's
#   sudo ./scripts/test-other-release.sh 13              # explicitly trixie (also: 12, bookworm, trixie)
#   sudo ETNP_TEST_QUICK=1 ./scripts/test-other-release.sh
#   sudo ./scripts/test-other-release.sh 13 -- bash      # a shell (or any command) in the copy instead of test.sh
#   sudo ./scripts/test-other-release.sh 13 --prepare    # only create/update the chroot and its packages
#   Needs root (debootstrap, chroot, mounts), debootstrap (installed with apt-get if missing) and network access
#   to the Debian mirror ($ETNP_DEBIAN_MIRROR, default http://deb.debian.org/debian).
#
# How long (2 cores): the first run spends ~5 minutes on debootstrap and the packages, later runs none. Then the
#   suite: ETNP_TEST_QUICK=1 (release build, C++ and Python tests) ~30 minutes from scratch, the full run (plus
#   the ASan+UBSan and TSan builds and runs) about two hours. The build folders stay in the chroot's copy and
#   only changed files are copied, so a rerun rebuilds only what changed.
#
# Where it caches: $ETNP_CHROOT_CACHE (default /var/cache/etnp)/chroot-<codename>; the copy of the tree is
#   /etnp/main inside it, ../shared is /etnp/shared. Each run's full log is written to
#   $ETNP_CHROOT_CACHE/logs/<codename>-<date>.log. Delete chroot-<codename> to start afresh (nothing is mounted
#   there after a run; the script refuses to delete a chroot with something mounted in it).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ETNP_CHROOT_CACHE:-/var/cache/etnp}"
mirror="${ETNP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${ETNP_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

die() { echo "test-other-release: $*" >&2; exit 2; }

# --- Arguments --------------------------------------------------------------------------------------------
release=""
prepare_only=0
command=()
while [ $# -gt 0 ]; do
  case "$1" in
    12|bookworm) release=bookworm ;;
    13|trixie) release=trixie ;;
    --prepare) prepare_only=1 ;;
    --) shift; command=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (expected 12, 13, bookworm, trixie, --prepare or -- COMMAND...)" ;;
  esac
  shift
done
host_version="$(cat /etc/debian_version 2>/dev/null || echo unknown)"
case "$host_version" in
  12*|bookworm*) host=bookworm ;;
  13*|trixie*) host=trixie ;;
  *) host=unknown ;;
esac
if [ -z "$release" ]; then
  case "$host" in
    bookworm) release=trixie ;;
    trixie) release=bookworm ;;
    *) die "this machine runs Debian '$host_version', neither 12 nor 13: name the release (12 or 13)" ;;
  esac
fi
[ "$(id -u)" = "0" ] || die "needs root (debootstrap, chroot and mounts): run it with sudo"

root="$cache/chroot-$release"
inner=/etnp
mkdir -p "$cache/logs"

# One run per chroot at a time: a second one would unmount the first one's mounts.
exec 9>"$cache/chroot-$release.lock"
flock -n 9 || die "another run is using $root (lock $cache/chroot-$release.lock)"

# --- Mounts, undone on any exit ---------------------------------------------------------------------------
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null ||
      echo "test-other-release: could not unmount ${mounted[$i]}" >&2
  done
  mounted=()
}
trap unmount_all EXIT
trap 'exit 130' INT TERM
mount_in() {  # mount_in TARGET mount-arguments...
  local target="$1"; shift
  mkdir -p "$target"
  mountpoint -q "$target" && die "$target is already mounted (a run that was killed?): unmount it first"
  mount "$@" "$target"
  mounted+=("$target")
}
anything_mounted_under() { findmnt -rn -o TARGET | grep -q "^$1\(/\|$\)"; }

# --- 1. The chroot ----------------------------------------------------------------------------------------
if [ ! -e "$root/.etnp-bootstrapped" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
  if [ -e "$root" ]; then
    anything_mounted_under "$root" && die "$root has something mounted in it; unmount it before it is recreated"
    echo "removing the incomplete chroot $root"
    rm -rf --one-file-system "$root"
  fi
  echo "=== debootstrap $release into $root (once)"
  debootstrap --variant=minbase --components=main "$release" "$root" "$mirror" > "$cache/logs/debootstrap-$release.log" 2>&1 ||
    { tail -20 "$cache/logs/debootstrap-$release.log" >&2; die "debootstrap failed (log: $cache/logs/debootstrap-$release.log)"; }
  cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror $release main
deb $mirror $release-updates main
deb $security_mirror $release-security main
EOF
  # No services start inside the chroot when packages are installed.
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  echo 'APT::Install-Recommends "false";' > "$root/etc/apt/apt.conf.d/99etnp-no-recommends"
  touch "$root/.etnp-bootstrapped"
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
release_version="$(cat "$root/etc/debian_version")"

# --- 2. The copy of the working tree ----------------------------------------------------------------------
# Tracked files (those deleted in the working tree left out) and untracked ones git does not ignore. Only files
# whose content differs from the copy's are copied, and they get the current time: a file that changed on the
# host (even to an older time stamp, as a checkout can leave it) is newer than the chroot's build outputs, an
# unchanged one is not, so ninja rebuilds exactly what changed. Files of an earlier copy that are no longer in
# the list are removed; the build folders (ignored, /build*/) stay.
dest="$root$inner/main"
mkdir -p "$dest"
list="$(mktemp)"
trap 'rm -f "$list"; unmount_all' EXIT
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do { [ -f "$f" ] || [ -L "$f" ]; } && printf '%s\0' "$f"; done) > "$list"
copied=0
while IFS= read -r -d '' f; do
  if [ -L "$repo/$f" ]; then
    [ -L "$dest/$f" ] && [ "$(readlink "$repo/$f")" = "$(readlink "$dest/$f")" ] && continue
  elif [ -f "$dest/$f" ] && [ ! -L "$dest/$f" ] && cmp -s "$repo/$f" "$dest/$f"; then
    continue
  fi
  mkdir -p "$(dirname "$dest/$f")"
  rm -f "$dest/$f"
  cp -P "$repo/$f" "$dest/$f"
  copied=$((copied + 1))
done < "$list"
(cd "$dest" && find . \( -path './build*' -o -path './.venv*' -o -name __pycache__ \) -prune -o \
    \( -type f -o -type l \) -printf '%P\0' |
  sort -z | comm -z -23 - <(sort -z "$list") | xargs -0 -r rm -f --)
file_count="$(tr -cd '\0' < "$list" | wc -c)"

# --- 3. Mounts --------------------------------------------------------------------------------------------
mount_in "$root/proc" -t proc proc
mount_in "$root/sys" -t sysfs sysfs
mount_in "$root/dev" --bind /dev
mount_in "$root/dev/pts" --bind /dev/pts
mount_in "$root/dev/shm" -t tmpfs tmpfs
if [ -d "$repo/../shared" ]; then
  mount_in "$root$inner/shared" --bind "$(cd "$repo/../shared" && pwd)"
  mount -o remount,bind,ro "$root$inner/shared"
fi
# The live exports, made here (the chroot has no torch wheels): this machine's venv exports what its cache
# lacks and lists the folders; the cache is mounted read-only where those paths point.
live_note="skipped ($([ ${#command[@]} -gt 0 ] || [ "$prepare_only" = 1 ] && echo "not running the suite" || echo "no dev venv on this machine"))"
live_vars=(ETNP_SKIP_LIVE=1)
if [ ${#command[@]} -eq 0 ] && [ "$prepare_only" = 0 ] && [ "${ETNP_SKIP_LIVE:-0}" != "1" ] &&
   venv="$("$repo/scripts/dev-venv.sh" 2>/dev/null)"; then
  live_cache="${ETNP_LIVE_CACHE:-$HOME/.cache/etnp/live-exports}"
  records="$root$inner/live-records.txt"
  if (cd "$repo" && ETNP_LIVE_CACHE="$live_cache" "$venv/bin/python" tests/live/export.py > "$records") &&
     [ -s "$records" ]; then
    mount_in "$root$live_cache" --bind "$live_cache"
    mount -o remount,bind,ro "$root$live_cache"
    live_vars=(ETNP_LIVE_RECORDS="$inner/live-records.txt")
    live_note="$(grep -c . "$records") exports made on this machine, run by etnp there"
  else
    live_note="skipped (tests/live/export.py failed on this machine)"
  fi
fi

# --- 4. The suite -----------------------------------------------------------------------------------------
env_vars=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
          TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive "${live_vars[@]}")
for v in ETNP_TEST_QUICK ETNP_JOBS; do
  [ -n "${!v+x}" ] && env_vars+=("$v=${!v}")
done
in_chroot() { chroot "$root" /usr/bin/env -i "${env_vars[@]}" /bin/bash -c 'cd /etnp/main && "$@"' bash "$@"; }

echo "=== host: Debian $host_version; chroot: Debian $release_version ($release) at $root"
echo "=== $file_count files in $inner/main ($copied changed since the last run); ../shared: $([ -d "$repo/../shared" ] && echo "mounted read-only" || echo "absent (fixture tests skip)"); live exports: $live_note"
if [ "$prepare_only" = 1 ]; then
  in_chroot ./scripts/install-deps.sh --test
  echo "=== chroot ready: $root"
  exit 0
fi
if [ ${#command[@]} -gt 0 ]; then
  set +e
  in_chroot "${command[@]}"
  exit $?
fi

log="$cache/logs/$release-$(date +%Y%m%d-%H%M%S).log"
echo "=== running ./scripts/test.sh (ETNP_TEST_QUICK=${ETNP_TEST_QUICK:-0}); log: $log"
start=$SECONDS
set +e
in_chroot ./scripts/test.sh 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
minutes=$(( (SECONDS - start + 30) / 60 ))

echo
echo "=================== summary: Debian $release_version ($release) in a chroot, ${minutes} min"
# The step headers and each step's result lines: ctest's total, GoogleTest's and pytest's final counts, failures.
grep -E '^=== |tests passed|tests failed out of|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]|^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* =+$|^FAILED |ERROR: |ThreadSanitizer:|AddressSanitizer:|runtime error:' "$log" |
  grep -v '^=== running' || true
if [ "$status" = 0 ]; then
  echo "=================== PASS: ./scripts/test.sh succeeded on Debian $release"
else
  echo "=================== FAIL: ./scripts/test.sh exited with $status on Debian $release (log: $log)"
fi
exit "$status"
