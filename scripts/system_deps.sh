#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's Chromium for the browser test of
# the audit page (Playwright drives it; Playwright's own browser download is not used).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "[deps] installing chromium (Debian) for the browser test"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "[deps] /usr/bin/chromium is missing and cannot be installed here (not root, or no apt-get):" \
       "install it (apt-get install -y chromium). tests/e2e/test_audit_browser.py FAILS when CI is set" \
       "and is skipped with a warning otherwise" >&2
fi
