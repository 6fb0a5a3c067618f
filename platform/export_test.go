package platform

// What the external tests (package platform_test) reach inside the
// package.

var TestCtx, TestLogger = testCtx, testLogger
