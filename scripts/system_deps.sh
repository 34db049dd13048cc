#!/usr/bin/env bash
# System packages the test suite needs beyond Python, from Debian:
#   chromium    the browser test of the audit page (Playwright drives it; its own browser download is not used);
#   nginx-light the reverse proxy in front of Serve (tests/ray/test_serve_nginx_front.py runs the shipped
#               serve_apps/nginx/relate.conf).
# Each test FAILS when CI is set and its program is missing, and is skipped with a warning otherwise.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || missing+=(nginx-light)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "[deps] installing ${missing[*]} (Debian) for the browser and reverse-proxy tests"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "[deps] ${missing[*]} missing and cannot be installed here (not root, or no apt-get):" \
       "apt-get install -y ${missing[*]}. tests/e2e/test_audit_browser.py and tests/ray/test_serve_nginx_front.py" \
       "FAIL when CI is set and are skipped with a warning otherwise" >&2
fi
