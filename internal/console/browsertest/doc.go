// Package browsertest drives platformd's web console (internal/console)
// end to end in headless Chromium. It is its own module so that the
// browser driver (chromedp) stays out of the platform module's
// requirements: a service importing the client packages never downloads
// it. scripts/test runs it with the rest of the suite.
package browsertest
