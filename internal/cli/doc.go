// Package cli is the main function shared by the platform's commands: the
// command runs under a context that SIGINT or SIGTERM ends, and the process
// exits with the code the command maps its error to. A UsageError marks
// an error in the command line, which every command maps to exit code 2.
package cli
