# Sourced by scripts/setup*.sh (bash). `apt_install WHAT-IS-SKIPPED PACKAGE…`: install Debian packages,
# best effort: root with apt-get only (an `apt-get update` first when the lists are stale), and
# otherwise a notice on stderr naming the packages and what is skipped without them.
apt_install() {
  local skipped=$1
  shift
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "notice: $* missing (needs root and apt-get); $skipped" >&2
    return 0
  fi
  local recommends=--no-install-recommends  # APT_WITH_RECOMMENDS=1: with them (Chromium's fonts)
  [ "${APT_WITH_RECOMMENDS:-}" = 1 ] && recommends=--install-recommends
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$recommends" "$@")
  "${install[@]}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && "${install[@]}" >/dev/null 2>&1; } \
    || echo "notice: $* could not be installed; $skipped" >&2
}
