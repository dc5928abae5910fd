// Package browser holds Linger's browser tests: headless Chromium (Debian's
// chromium package) driven by chromedp against the real server and real
// kernel processes, through internal/browsertest. The tests fail, never
// skip, when Chromium or axe-core is missing (make browser installs them,
// and make test runs it); they save screenshots under $LINGER_ARTIFACTS
// (default out/browser at the repository root) to be looked at.
package browser
