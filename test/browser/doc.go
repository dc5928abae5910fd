// Package browser holds Linger's browser tests: headless Chromium (Debian's
// chromium package) driven by chromedp against the real server and real
// kernel processes. The tests skip when no chromium is installed; they save
// screenshots under $LINGER_ARTIFACTS (default out/browser at the
// repository root) to be looked at.
package browser
