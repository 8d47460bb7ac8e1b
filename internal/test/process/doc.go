// Package process supervises the child processes of devcluster, localrun and
// the tests: each runs in a process group of its own with the parent-death
// signal set, writes to a log file, and is stopped by its pid, SIGTERM to
// the group first and SIGKILL after a grace period.
package process
