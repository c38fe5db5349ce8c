#!/usr/bin/env bash
# Build a genuine kube-apiserver v1.20.2 from Debian bookworm's `kubernetes`
# source package (orig tarball = upstream v1.20.2 with vendor/) using Debian's
# Go 1.19, and cache the binary outside the repository.
#
# Usage:   bin=$(scripts/build-kube-apiserver.sh | tail -n1)
#          scripts/build-kube-apiserver.sh --cached   # print the cached binary's path, or exit 1
#                                                     # without building (testkit finds it so)
#
# The last line of stdout is the absolute path of the binary; everything else
# (progress, build logs) goes to stderr.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/kube-apiserver-v1.20.2-<recipe>/kube-apiserver
#          <recipe> is a hash of this script, so a binary built by an older recipe (say, one
#          without the validator patch below) is never used again: the first run after a
#          change rebuilds once. If the binary exists and `--version` prints v1.20.2 the
#          script exits at once.
#
# On a machine whose apt sources have no Debian bookworm entry (Ubuntu, a newer
# Debian), set GATEWAY_LEADER_DEBIAN_MIRROR to a Debian archive URI.
#
# Needs root (or the packages already installed) on Debian bookworm: it
# installs golang-1.19-go, rsync, dpkg-dev and make with apt-get if missing.
# The source is fetched through a PRIVATE apt configuration (APT_CONFIG) whose
# deb-src entry reuses the URI of the machine's own Debian source; the
# machine's /etc/apt configuration is never modified.
#
# Two Go 1.19 fixes are applied to vendor/ before building:
# - reflect2 v1.0.1 crashes (SIGSEGV) on Go >= 1.18 at the first CRD: its non-test .go
#   files are replaced by Debian's reflect2 1.0.2 (json-iterator needs no swap).
# - The vendored OpenAPI type validators decide that a value "is null" with
#   reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)). Since
#   Go 1.18 that is true for "" and false, so every empty string and false in a custom
#   resource is refused with 422 "must be of type string: null": a ReferenceGrant to the
#   core group (group: ""), a condition with message: "", the upstream CRDs' default: "".
#   Real clusters accept all of them. The condition becomes `data == nil`, which is what
#   it meant; null and wrong types are still refused.
set -euo pipefail

# All normal output goes to stderr; fd 3 is the real stdout for the final path.
exec 3>&1 1>&2

readonly K8S_VERSION="v1.20.2"
readonly DEB_SRC_PKG="kubernetes"
readonly DEB_SRC_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
readonly DEB_SRC_VERSION_GLOB="1.20.5+really1.20.2-*"
readonly DEB_KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
readonly GO_DIR="/usr/lib/go-1.19/bin"
readonly REFLECT2_PKG="golang-github-modern-go-reflect2-dev"
readonly -a NULL_CHECK_FILES=(
  vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go
  vendor/github.com/go-openapi/validate/type.go
)
readonly NULL_CHECK_OLD='data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))'

log() { printf '[build-kube-apiserver] %s\n' "$*" >&2; }
die() { printf '[build-kube-apiserver] ERROR: %s\n' "$*" >&2; exit 1; }

CACHE_ROOT="${GATEWAY_LEADER_CACHE_DIR:-${HOME:?HOME is not set}/.cache/gateway-leader}"
RECIPE="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
CACHE_NAME="kube-apiserver-${K8S_VERSION}-${RECIPE}"
mkdir -p "$CACHE_ROOT/$CACHE_NAME" || die "cannot create cache dir $CACHE_ROOT/$CACHE_NAME"
DEST_DIR="$(cd "$CACHE_ROOT/$CACHE_NAME" && pwd -P)"
BIN="$DEST_DIR/kube-apiserver"
WORK="$DEST_DIR/work"

binary_ok() {
  local b="$1" out
  [[ -x "$b" ]] || return 1
  out="$("$b" --version 2>/dev/null)" || return 1
  [[ "$out" == "Kubernetes ${K8S_VERSION}" ]]
}

finish() {
  printf '%s\n' "$BIN" >&3
  exit 0
}

# ---- fast path --------------------------------------------------------------
if binary_ok "$BIN"; then
  log "cached binary is fine: $BIN"
  finish
fi
if [[ "${1:-}" == "--cached" ]]; then
  log "no kube-apiserver ${K8S_VERSION} built by this recipe at $BIN; run scripts/build-kube-apiserver.sh"
  exit 1
fi

# ---- lock: only one build at a time ----------------------------------------
exec 9>"$DEST_DIR/.lock"
if ! flock -n 9; then
  log "another build is running (lock $DEST_DIR/.lock); waiting for it..."
  flock 9
fi
# Someone else may have finished the build while we waited.
if binary_ok "$BIN"; then
  log "cached binary is fine: $BIN"
  finish
fi
if [[ -e "$BIN" ]]; then
  log "existing $BIN does not report ${K8S_VERSION}; rebuilding"
fi

on_error() {
  local rc=$? line=$1
  printf '[build-kube-apiserver] ERROR: command failed (exit %s) at line %s: %s\n' \
    "$rc" "$line" "$BASH_COMMAND" >&2
  printf '[build-kube-apiserver] the work dir is kept for inspection: %s\n' "$WORK" >&2
}
trap 'on_error $LINENO' ERR

# ---- host packages ----------------------------------------------------------
need_pkgs=()
[[ -x "$GO_DIR/go" ]] || need_pkgs+=(golang-1.19-go)
command -v rsync >/dev/null 2>&1 || need_pkgs+=(rsync)
command -v dpkg-source >/dev/null 2>&1 || need_pkgs+=(dpkg-dev)
command -v make >/dev/null 2>&1 || need_pkgs+=(make)
[[ -r "$DEB_KEYRING" ]] || need_pkgs+=(debian-archive-keyring)
command -v flock >/dev/null 2>&1 || die "flock (util-linux) is missing"
if ((${#need_pkgs[@]})); then
  log "installing missing packages: ${need_pkgs[*]}"
  [[ $(id -u) -eq 0 ]] || die "packages ${need_pkgs[*]} are missing and we are not root; install them first"
  # Use the machine's own apt configuration for installing.
  (
    unset APT_CONFIG
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${need_pkgs[@]}"
  ) || die "apt-get install ${need_pkgs[*]} failed"
  [[ -x "$GO_DIR/go" ]] || die "$GO_DIR/go still missing after installing golang-1.19-go"
fi

# ---- find the machine's Debian source URI for a suite -----------------------
# Prints the first URI of an enabled deb/deb-src entry (deb822 *.sources or
# one-line *.list / sources.list) whose suites contain $1 and components
# contain "main".
uri_for_suite() {
  local found
  found="$(uri_for_suite_all "$1" | head -n1)"
  printf '%s' "$found"
}
uri_for_suite_all() {
  local suite="$1" f
  local -a files=()
  for f in /etc/apt/sources.list.d/*.sources; do [[ -r "$f" ]] && files+=("$f"); done
  if ((${#files[@]})); then
    awk -v want="$suite" '
      function flush() {
        if (types ~ /(^|[ \t])deb(-src)?([ \t]|$)/ && tolower(enabled) != "no" &&
            (" " suites " ") ~ (" " want " ") && (" " comps " ") ~ / main / && uris != "") {
          split(uris, u, /[ \t]+/); print u[1]; found = 1; exit
        }
        types = ""; uris = ""; suites = ""; comps = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        line = $0; key = tolower(line); sub(/:.*/, "", key); gsub(/[ \t]/, "", key)
        val = line; sub(/^[^:]*:[ \t]*/, "", val); gsub(/[ \t]+/, " ", val); sub(/ $/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "components") comps = val
        else if (key == "enabled") enabled = val
      }
      END { if (!found) flush() }
    ' "${files[@]}" | head -n1
  fi
  files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do [[ -r "$f" ]] && files+=("$f"); done
  if ((${#files[@]})); then
    awk -v want="$suite" '
      /^[ \t]*#/ { next }
      $1 == "deb" || $1 == "deb-src" {
        i = 2
        if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        uri = $i; s = $(i + 1); hasmain = 0
        for (j = i + 2; j <= NF; j++) if ($j == "main") hasmain = 1
        if (s == want && hasmain) { print uri; exit }
      }
    ' "${files[@]}" | head -n1
  fi
}

# ---- fresh work dir ----------------------------------------------------------
if [[ -e "$WORK" ]]; then
  log "removing leftover work dir from an earlier, unfinished build: $WORK"
  rm -rf "$WORK"
fi
mkdir -p "$WORK"/apt/{lists/partial,cache/archives/partial,sources.list.d} "$WORK"/dl "$WORK"/debs
start_ts=$(date +%s)

# ---- private apt configuration ----------------------------------------------
APT_DIR="$WORK/apt"
cat >"$APT_DIR/apt.conf" <<EOF
Dir::Etc::sourcelist "$APT_DIR/sources.list";
Dir::Etc::sourceparts "$APT_DIR/sources.list.d";
Dir::State::lists "$APT_DIR/lists/";
Dir::Cache "$APT_DIR/cache/";
Dir::Cache::archives "$APT_DIR/cache/archives/";
Dir::Cache::pkgcache "$APT_DIR/cache/pkgcache.bin";
Dir::Cache::srcpkgcache "$APT_DIR/cache/srcpkgcache.bin";
APT::Sandbox::User "root";
Acquire::Languages "none";
EOF
export APT_CONFIG="$APT_DIR/apt.conf"

add_suite() { # suite -> appends deb + deb-src lines; returns 1 if no URI known
  local suite="$1" uri
  # A machine without a bookworm entry (Ubuntu, a newer Debian) names a Debian archive itself.
  uri="${GATEWAY_LEADER_DEBIAN_MIRROR:-$(uri_for_suite "$suite")}"
  if [[ -z "$uri" ]]; then
    return 1
  fi
  log "using Debian source $uri suite $suite"
  cat >>"$APT_DIR/sources.list" <<EOF
deb-src [signed-by=$DEB_KEYRING target=Sources] $uri $suite main
deb [signed-by=$DEB_KEYRING target=Packages] $uri $suite main
EOF
}

apt_update() {
  log "apt-get update (private config $APT_CONFIG)"
  apt-get update --error-on=any >&2 || die "apt-get update with the private apt config failed"
}

source_versions() {
  apt-cache showsrc --only-source "$DEB_SRC_PKG" 2>/dev/null | awk '/^Version:/ {print $2}' | sort -u
}

: >"$APT_DIR/sources.list"
add_suite bookworm \
  || die "no Debian 'bookworm' 'main' entry found in /etc/apt/sources.list or /etc/apt/sources.list.d/ to take the mirror URI from; set GATEWAY_LEADER_DEBIAN_MIRROR to a Debian archive URI (or point GATEWAY_LEADER_KUBE_APISERVER at a kube-apiserver v1.20.2 binary, or GATEWAY_LEADER_TEST_KUBECONFIG at a cluster)"
apt_update
versions="$(source_versions)"
chosen=""
if grep -qxF "$DEB_SRC_VERSION" <<<"$versions"; then
  chosen="$DEB_SRC_VERSION"
else
  log "source $DEB_SRC_PKG=$DEB_SRC_VERSION not in bookworm (have: $(echo $versions)); trying bookworm-updates and bookworm-security"
  add_suite bookworm-updates || log "no bookworm-updates entry on this machine; skipping it"
  add_suite bookworm-security || log "no bookworm-security entry on this machine; skipping it"
  apt_update
  versions="$(source_versions)"
  if grep -qxF "$DEB_SRC_VERSION" <<<"$versions"; then
    chosen="$DEB_SRC_VERSION"
  else
    while read -r v; do
      # shellcheck disable=SC2053
      [[ -n "$v" && "$v" == $DEB_SRC_VERSION_GLOB ]] || continue
      if [[ -z "$chosen" ]] || dpkg --compare-versions "$v" gt "$chosen"; then chosen="$v"; fi
    done <<<"$versions"
  fi
fi
[[ -n "$chosen" ]] || die "no $DEB_SRC_PKG source version matching $DEB_SRC_VERSION_GLOB offered (have: $(echo $versions))"
log "using source package $DEB_SRC_PKG=$chosen"

# ---- download + unpack the source package ------------------------------------
(cd "$WORK/dl" && apt-get source --download-only "$DEB_SRC_PKG=$chosen" >&2) \
  || die "apt-get source --download-only $DEB_SRC_PKG=$chosen failed"
dsc=("$WORK"/dl/*.dsc)
[[ -f "${dsc[0]}" ]] || die "no .dsc downloaded"
log "unpacking ${dsc[0]##*/}"
dpkg-source -x "${dsc[0]}" "$WORK/src" >&2
SRC="$WORK/src"
grep -q "tag: ${K8S_VERSION}" "$SRC/hack/lib/version.sh" \
  || die "unpacked source is not kubernetes ${K8S_VERSION} (hack/lib/version.sh has no 'tag: ${K8S_VERSION}')"
[[ -d "$SRC/vendor/github.com/modern-go/reflect2" ]] \
  || die "unpacked source has no vendored reflect2"

# ---- replace vendored reflect2 ---------------------------------------------------
(cd "$WORK/debs" && apt-get download "$REFLECT2_PKG" >&2) \
  || die "apt-get download $REFLECT2_PKG failed"
for deb in "$WORK"/debs/*.deb; do
  dpkg-deb -x "$deb" "$WORK/debs/root"
done
GOCODE="$WORK/debs/root/usr/share/gocode/src"

replace_vendor() { # import path
  local imp="$1" from="$GOCODE/$1" to="$SRC/vendor/$1" n_old n_new
  [[ -d "$from" ]] || die "Debian package has no $imp under usr/share/gocode/src"
  n_old=$(find "$to" -name '*.go' ! -name '*_test.go' | wc -l)
  find "$to" -name '*.go' ! -name '*_test.go' -delete
  n_new=0
  while IFS= read -r -d '' f; do
    mkdir -p "$to/$(dirname "$f")"
    cp -L "$from/$f" "$to/$f"
    n_new=$((n_new + 1))
  done < <(cd "$from" && find . \( -type f -o -type l \) -name '*.go' ! -name '*_test.go' -print0)
  ((n_new > 0)) || die "no .go files copied for $imp"
  log "vendor/$imp: replaced $n_old .go files by $n_new from Debian"
}
replace_vendor github.com/modern-go/reflect2

# ---- the OpenAPI validators' null check (see the header) -------------------------
for f in "${NULL_CHECK_FILES[@]}"; do
  n=$(grep -cF "$NULL_CHECK_OLD" "$SRC/$f" || true)
  [[ "$n" == 1 ]] || die "$f: expected the zero-value null check once, found it $n times"
  PATTERN="$NULL_CHECK_OLD" perl -0pi -e 's/\Q$ENV{PATTERN}\E/data == nil/' "$SRC/$f"
  ! grep -qF "$NULL_CHECK_OLD" "$SRC/$f" || die "$f: patching the null check failed"
  log "$f: null check is now \`data == nil\`"
done
# The build runs in GOPATH mode (hack/lib/init.sh sets GO111MODULE=off), so
# vendor/modules.txt and go.mod are not consulted and need no adjustment.

# ---- build ---------------------------------------------------------------------
log "building cmd/kube-apiserver with $("$GO_DIR/go" version) (takes ~5 min on 2 cores)"
build_start=$(date +%s)
(
  cd "$SRC"
  export PATH="$GO_DIR:$PATH"
  export GOPROXY=off GOFLAGS="" GO111MODULE=off GOTOOLCHAIN=local
  export GOCACHE="$WORK/gocache" GOTMPDIR="" CGO_ENABLED=0
  unset GOROOT GOPATH
  make WHAT=cmd/kube-apiserver
) >&2 || die "make WHAT=cmd/kube-apiserver failed (work dir kept: $WORK)"
log "build took $(($(date +%s) - build_start)) s"

built="$SRC/_output/bin/kube-apiserver"
[[ -e "$built" ]] || built="$SRC/_output/local/bin/linux/$("$GO_DIR/go" env GOARCH)/kube-apiserver"
[[ -e "$built" ]] || die "build finished but no kube-apiserver binary found under $SRC/_output"

# ---- install atomically ----------------------------------------------------------
tmp="$DEST_DIR/.kube-apiserver.tmp.$$"
cp -L "$built" "$tmp"
chmod 0755 "$tmp"
if ! binary_ok "$tmp"; then
  got="$("$tmp" --version 2>&1 || true)"
  rm -f "$tmp"
  die "built binary does not report Kubernetes ${K8S_VERSION} (got: $got)"
fi
mv -f "$tmp" "$BIN"
trap - ERR
rm -rf "$WORK"
# Binaries of older recipes are never used again; free their ~130 MB each.
for old in "$CACHE_ROOT"/kube-apiserver-"${K8S_VERSION}" "$CACHE_ROOT"/kube-apiserver-"${K8S_VERSION}"-*; do
  [[ -d "$old" && "$(cd "$old" && pwd -P)" != "$DEST_DIR" ]] || continue
  log "removing the binary of an older recipe: $old"
  rm -rf "$old"
done
log "done in $(($(date +%s) - start_ts)) s: $("$BIN" --version)"
finish
